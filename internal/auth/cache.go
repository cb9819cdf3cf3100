package auth

import (
	"container/list"
	"sync"
	"time"
)

// verifiedCache remembers successful verifications: an LRU of at most size
// entries, each valid for ttl and only for the credential set generation it
// was verified against. It is safe for concurrent use.
type verifiedCache struct {
	ttl  time.Duration
	size int

	mu  sync.Mutex
	gen uint64
	lru *list.List // of *cacheEntry, most recently used first
	idx map[[32]byte]*list.Element
}

type cacheEntry struct {
	key       [32]byte // HMAC-SHA256 of "principal:password"
	principal string
	expires   time.Time
}

func newVerifiedCache(ttl time.Duration, size int) *verifiedCache {
	return &verifiedCache{ttl: ttl, size: size, lru: list.New(), idx: make(map[[32]byte]*list.Element)}
}

// get returns the principal cached under key for generation gen, if any and
// not expired at now.
func (c *verifiedCache) get(key [32]byte, gen uint64, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return "", false
	}
	el, ok := c.idx[key]
	if !ok {
		return "", false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.expires) {
		c.lru.Remove(el)
		delete(c.idx, key)
		return "", false
	}
	c.lru.MoveToFront(el)
	return e.principal, true
}

// put caches principal under key until now+ttl, evicting the least
// recently used entry when full. It drops the entry when gen is not the
// current generation (the credentials changed while verifying).
func (c *verifiedCache) put(key [32]byte, principal string, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if el, ok := c.idx[key]; ok {
		e := el.Value.(*cacheEntry)
		e.principal, e.expires = principal, now.Add(c.ttl)
		c.lru.MoveToFront(el)
		return
	}
	for c.lru.Len() >= c.size {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.idx, oldest.Value.(*cacheEntry).key)
	}
	c.idx[key] = c.lru.PushFront(&cacheEntry{key: key, principal: principal, expires: now.Add(c.ttl)})
}

// reset drops every entry and makes gen the current generation.
func (c *verifiedCache) reset(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen = gen
	c.lru.Init()
	clear(c.idx)
}

// len returns the number of entries, expired ones included.
func (c *verifiedCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
