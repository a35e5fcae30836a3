package gateway

// A registration's lifetime: its deadline (the sandbox's Timeout and
// rules.GatewayGrace, from Register; moved by Extend), past which its credential is
// refused and, at the next sweep, the registration is forgotten; and its binding to
// the engine's sandbox id (Bind), by which an adapter releases it (UnregisterSandbox)
// when the engine no longer knows the sandbox's labels.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// expired reports whether e's deadline has passed at now.
func (e *entry) expired(now time.Time) bool {
	return !e.deadline.IsZero() && !now.Before(e.deadline)
}

// dropLocked removes e from every index; the caller holds g.mu and closes e.proxy
// after unlocking.
func (g *Gateway) dropLocked(e *entry) {
	if g.byID[e.id] == e {
		delete(g.byID, e.id)
	}
	if g.byHash[e.hash] == e {
		delete(g.byHash, e.hash)
	}
	if e.sandbox != "" && g.bySandbox[e.sandbox] == e {
		delete(g.bySandbox, e.sandbox)
	}
}

// live is m[k] unless it is past its deadline; such an entry is dropped at once.
func live[K comparable](g *Gateway, m map[K]*entry, k K) *entry {
	g.mu.Lock()
	e, gone := liveLocked(g, m, k)
	g.mu.Unlock()
	if gone != nil {
		gone.proxy.Close()
	}
	return e
}

// liveLocked is live for a caller that holds g.mu: an entry past its deadline is
// dropped and returned as gone, whose proxy the caller closes after unlocking.
func liveLocked[K comparable](g *Gateway, m map[K]*entry, k K) (e, gone *entry) {
	e = m[k]
	if e == nil || !e.expired(g.c.Now()) {
		return e, nil
	}
	g.dropLocked(e)
	return nil, e
}

// Bind implements Registrar.
func (g *Gateway) Bind(_ context.Context, id, sandbox string) error {
	if sandbox == "" {
		return errors.New("bind a registration: the engine's sandbox id is required")
	}
	g.mu.Lock()
	e, gone := liveLocked(g, g.byID, id)
	if e != nil {
		if e.sandbox != "" && g.bySandbox[e.sandbox] == e {
			delete(g.bySandbox, e.sandbox)
		}
		if old := g.bySandbox[sandbox]; old != nil {
			old.sandbox = ""
		}
		e.sandbox = sandbox
		g.bySandbox[sandbox] = e
	}
	g.mu.Unlock()
	if gone != nil {
		gone.proxy.Close()
	}
	if e == nil {
		return fmt.Errorf("bind %s to sandbox %s: %w", id, sandbox, ErrUnknown)
	}
	return nil
}

// UnregisterSandbox implements Registrar.
func (g *Gateway) UnregisterSandbox(_ context.Context, sandbox string) error {
	g.drop(func() *entry { return g.bySandbox[sandbox] })
	return nil
}

// Extend implements Registrar.
func (g *Gateway) Extend(_ context.Context, sandbox string, ttl time.Duration) error {
	if err := checkTTL(ttl); err != nil {
		return fmt.Errorf("extend sandbox %s's credential: %w", sandbox, err)
	}
	g.mu.Lock()
	e, gone := liveLocked(g, g.bySandbox, sandbox)
	if e != nil {
		switch d := g.c.Now().Add(ttl); {
		case ttl == 0:
			e.deadline = time.Time{}
		case e.deadline.IsZero() || d.After(e.deadline):
			e.deadline = d
		}
	}
	g.mu.Unlock()
	if gone != nil {
		gone.proxy.Close()
	}
	return nil
}

// maxSweep bounds the registrations one sweep looks at, so the lock is never held
// long; the map's random order brings the rest to later ticks.
const maxSweep = 4096

// sweepLoop forgets registrations past their deadline every c.Sweep until Close.
func (g *Gateway) sweepLoop() {
	defer close(g.done)
	t := time.NewTicker(g.c.Sweep)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.sweep()
		}
	}
}

// sweep forgets registrations past their deadline (at most maxSweep looked at) and
// returns how many.
func (g *Gateway) sweep() int {
	now := g.c.Now()
	var gone []*entry
	g.mu.Lock()
	n := 0
	for _, e := range g.byID {
		if n++; n > maxSweep {
			break
		}
		if e.expired(now) {
			g.dropLocked(e)
			gone = append(gone, e)
		}
	}
	g.mu.Unlock()
	for _, e := range gone {
		e.proxy.Close()
	}
	if len(gone) > 0 {
		g.log.Info("forgot registrations past their lifetime", "count", len(gone))
	}
	return len(gone)
}
