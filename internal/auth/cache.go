package auth

import (
	"container/list"
	"sync"
	"time"
)

// verifiedCache remembers successful verifications: an LRU of at most size
// entries and at most one entry per principal, each valid only for the
// credential set generation it was verified against and expiring ttl after
// its last use (a hit renews it). It is safe for concurrent use.
type verifiedCache struct {
	ttl  time.Duration
	size int

	mu  sync.Mutex
	gen uint64
	lru *list.List // of *cacheEntry, most recently used first
	idx map[[32]byte]*list.Element
	// byPrincipal holds each principal's one entry, so a principal whose
	// hash accepts many passwords (bcrypt ignores bytes past 72) cannot
	// push other principals out.
	byPrincipal map[string]*list.Element
}

type cacheEntry struct {
	key       [32]byte // HMAC-SHA256 of the principal and the password bytes its hash checks
	principal string
	expires   time.Time // last use + ttl
}

func newVerifiedCache(ttl time.Duration, size int) *verifiedCache {
	return &verifiedCache{
		ttl: ttl, size: size, lru: list.New(),
		idx: make(map[[32]byte]*list.Element), byPrincipal: make(map[string]*list.Element),
	}
}

// get returns the principal cached under key for generation gen, if any and
// not expired at now, and renews the entry until now+ttl.
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
		c.remove(el)
		return "", false
	}
	e.expires = now.Add(c.ttl)
	c.lru.MoveToFront(el)
	return e.principal, true
}

// put caches principal under key until now+ttl, replacing the principal's
// earlier entry and evicting the least recently used entry when full. It
// drops the entry when gen is not the current generation (the credentials
// changed while verifying).
func (c *verifiedCache) put(key [32]byte, principal string, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if el, ok := c.idx[key]; ok {
		c.remove(el)
	}
	if el, ok := c.byPrincipal[principal]; ok {
		c.remove(el)
	}
	for c.lru.Len() >= c.size {
		c.remove(c.lru.Back())
	}
	el := c.lru.PushFront(&cacheEntry{key: key, principal: principal, expires: now.Add(c.ttl)})
	c.idx[key] = el
	c.byPrincipal[principal] = el
}

// remove drops el. Callers hold mu.
func (c *verifiedCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.idx, e.key)
	if c.byPrincipal[e.principal] == el {
		delete(c.byPrincipal, e.principal)
	}
}

// reset drops every entry and makes gen the current generation.
func (c *verifiedCache) reset(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen = gen
	c.lru.Init()
	clear(c.idx)
	clear(c.byPrincipal)
}

// len returns the number of entries, expired ones included.
func (c *verifiedCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
