package config

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
)

// BasicLimits are the intake's rationing of Basic authentication
// (auth.BasicOptions) and the trusted proxies whose forwarding header names
// the client address it rations by. Defaults are auth's; a zero HashSlots
// or HashQueue means auth's computed default.
type BasicLimits struct {
	FailureBurst        int            // MIGHTYETL_BASIC_FAILURE_BURST, default 10 (1..10000): failed logins a client address may make at once
	FailureRefill       time.Duration  // MIGHTYETL_BASIC_FAILURE_REFILL, default 6s (100ms..1h): time in which an address earns back one failed login
	HashSlots           int            // MIGHTYETL_BASIC_HASH_SLOTS, default 0 = max(2, GOMAXPROCS) (0..64): password verifications at once
	HashQueue           int            // MIGHTYETL_BASIC_HASH_QUEUE, default 0 = 8 per slot (0..10000): requests waiting for a slot in all
	HashQueuePerAddress int            // MIGHTYETL_BASIC_HASH_QUEUE_PER_ADDRESS, default 8 (1..1000): requests of one address waiting for a slot
	HashMaxWait         time.Duration  // MIGHTYETL_BASIC_HASH_MAX_WAIT, default 2s (10ms..1m): longest wait for a slot
	TrustedProxies      []netip.Prefix // MIGHTYETL_TRUSTED_PROXIES: comma-separated CIDRs or addresses, default none
	TrustedProxyHeader  string         // MIGHTYETL_TRUSTED_PROXY_HEADER, default X-Forwarded-For (or Forwarded): the header the trusted proxies write
}

// Bounds of the Basic rationing settings.
const (
	MaxBasicFailureBurst        = 10000
	MaxBasicHashSlots           = 64 // argon2id takes 19 MiB a verification
	MaxBasicHashQueue           = 10000
	MaxBasicHashQueuePerAddress = 1000
)

// RegisterBasicLimits registers the Basic rationing and trusted-proxy
// settings on l into dst.
func RegisterBasicLimits(l *Loader, dst *BasicLimits) {
	l.Int(&dst.FailureBurst, "MIGHTYETL_BASIC_FAILURE_BURST", "basic-failure-burst", auth.DefaultFailureBurst, 1, MaxBasicFailureBurst,
		"failed Basic logins a client address may make at once (basic mode)")
	l.Duration(&dst.FailureRefill, "MIGHTYETL_BASIC_FAILURE_REFILL", "basic-failure-refill", auth.DefaultFailureRefill, 100*time.Millisecond, time.Hour,
		"time in which a client address earns back one failed login (basic mode)")
	l.Int(&dst.HashSlots, "MIGHTYETL_BASIC_HASH_SLOTS", "basic-hash-slots", 0, 0, MaxBasicHashSlots,
		"password verifications at once; 0: max(2, GOMAXPROCS) (basic mode)")
	l.Int(&dst.HashQueue, "MIGHTYETL_BASIC_HASH_QUEUE", "basic-hash-queue", 0, 0, MaxBasicHashQueue,
		"requests waiting for a verification slot in all (503 beyond); 0: 8 per slot (basic mode)")
	l.Int(&dst.HashQueuePerAddress, "MIGHTYETL_BASIC_HASH_QUEUE_PER_ADDRESS", "basic-hash-queue-per-address", auth.DefaultHashWaitersPerAddress, 1, MaxBasicHashQueuePerAddress,
		"requests of one client address waiting for a verification slot (429 beyond) (basic mode)")
	l.Duration(&dst.HashMaxWait, "MIGHTYETL_BASIC_HASH_MAX_WAIT", "basic-hash-max-wait", auth.DefaultMaxHashWait, 10*time.Millisecond, time.Minute,
		"longest wait for a verification slot (503 after) (basic mode)")
	l.String(new(string), "MIGHTYETL_TRUSTED_PROXIES", "trusted-proxies", "",
		"comma-separated CIDRs of reverse proxies whose forwarding header names the client address; default none", func(s string) error {
			p, err := auth.ParseTrustedProxies(s)
			if err != nil {
				return fmt.Errorf("must be comma-separated CIDR prefixes or IP addresses: %v", err)
			}
			dst.TrustedProxies = p
			return nil
		})
	l.String(new(string), "MIGHTYETL_TRUSTED_PROXY_HEADER", "trusted-proxy-header", auth.HeaderXForwardedFor,
		"header the trusted proxies write: X-Forwarded-For or Forwarded", func(s string) error {
			h, err := auth.ParseForwardedHeader(s)
			dst.TrustedProxyHeader = h
			return err
		})
}

// Validate checks the cross-setting rule: an explicit total queue holds at
// least one address's queue.
func (b BasicLimits) Validate() error {
	if b.HashQueue != 0 && b.HashQueue < b.HashQueuePerAddress {
		return fmt.Errorf("MIGHTYETL_BASIC_HASH_QUEUE: must be 0 (8 per slot) or at least MIGHTYETL_BASIC_HASH_QUEUE_PER_ADDRESS (%d)", b.HashQueuePerAddress)
	}
	return nil
}

// Options returns the auth.BasicOptions of these limits for the
// credentials file path.
func (b BasicLimits) Options(credentialsFile string) auth.BasicOptions {
	return auth.BasicOptions{
		CredentialsFile:          credentialsFile,
		FailureBurst:             b.FailureBurst,
		FailureRefill:            b.FailureRefill,
		HashSlots:                b.HashSlots,
		MaxHashWaiters:           b.HashQueue,
		MaxHashWaitersPerAddress: b.HashQueuePerAddress,
		MaxHashWait:              b.HashMaxWait,
		TrustedProxies:           b.TrustedProxies,
		ForwardedHeader:          b.TrustedProxyHeader,
	}
}
