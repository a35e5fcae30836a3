package coderun

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// Cleanup never holds the state lock (DataDir/sessions.lock, which every call takes
// several times) across an engine call: a terminate takes a second or two, and
// reaping twenty sessions one by one under that lock once held a warm run_code for
// 40 s. The reaper takes its victims out of the state under the lock, each with its
// session's lock held, and terminates them outside it, a few at a time; a session's
// next call waits only for its own sandbox to go (its volume is then free to mount
// again), and every other session runs meanwhile.

// ConfigTTL, as Cleanup's ttl, means the configuration's volume_ttl_minutes.
const ConfigTTL time.Duration = -1

// reapParallel is how many sandboxes a reap terminates at once.
const reapParallel = 4

// reapVictim is a sandbox the reaper took out of the state.
type reapVictim struct {
	id    string
	st    sessionState
	spare bool
	// unlock releases the session's lock, held until the sandbox is gone.
	unlock func()
}

// ReapIdle destroys the sandboxes of sessions unused for IdleTimeout (volumes stay),
// and idle spares with their volumes, and returns the sessions' ids.
func (r *Runner) ReapIdle(ctx context.Context, now time.Time) ([]string, error) {
	var victims []reapVictim
	err := r.withState(func(m map[string]*sessionState) error {
		for id, st := range m {
			if st.Sandbox == "" || now.Sub(st.LastUsed) < r.o.IdleTimeout {
				continue
			}
			v := reapVictim{id: id, st: *st, spare: isSpare(id)}
			if v.spare {
				// An unclaimed spare idles out too; the next claim boots another.
				delete(m, id)
			} else {
				// A session with a call in progress is busy, not idle.
				unlock, err := r.lockSession(id, false)
				if err != nil {
					return err
				}
				if unlock == nil {
					continue
				}
				v.unlock = unlock
				st.Sandbox, st.Pid = "", 0
			}
			victims = append(victims, v)
		}
		return nil
	})
	if err != nil {
		for _, v := range victims {
			if v.unlock != nil {
				v.unlock()
			}
		}
		return nil, err
	}
	return r.terminateVictims(ctx, victims)
}

// terminateVictims terminates the victims' sandboxes (and a spare's volume), a few
// at a time, and releases their session locks. A sandbox that fails to go is put
// back in the state, so a later reap tries again.
func (r *Runner) terminateVictims(ctx context.Context, victims []reapVictim) ([]string, error) {
	reaped := []string{}
	if len(victims) == 0 {
		return reaped, nil
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, reapParallel)
	)
	for _, v := range victims {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := r.eng.Terminate(ctx, v.st.Sandbox)
			if err == nil && v.spare {
				err = r.removeVolume(ctx, v.st.Volume)
			}
			if err != nil {
				err = errors.Join(err, r.restoreVictim(v))
			}
			if v.unlock != nil {
				v.unlock()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if !v.spare {
				reaped = append(reaped, v.id)
			}
		}()
	}
	wg.Wait()
	return reaped, errors.Join(errs...)
}

// restoreVictim puts a sandbox that failed to terminate back in the state, unless the
// session got another since.
func (r *Runner) restoreVictim(v reapVictim) error {
	return r.withState(func(m map[string]*sessionState) error {
		p := m[v.id]
		switch {
		case p == nil:
			st := v.st
			m[v.id] = &st
		case p.Sandbox == "":
			p.Sandbox, p.Pid = v.st.Sandbox, v.st.Pid
		}
		return nil
	})
}

// CleanupReport says what Cleanup removed.
type CleanupReport struct {
	// Sandboxes are the sessions whose idle sandbox was destroyed.
	Sandboxes []string `json:"sandboxes"`
	// Volumes are the volumes deleted with their registry rows and code modules.
	Volumes []string `json:"volumes"`
}

// Cleanup destroys idle sandboxes, then deletes volumes unused for ttl with their
// registry rows and code modules: ConfigTTL (any negative ttl) means
// volume_ttl_minutes, and 0 every volume no sandbox mounts. A volume mounted by a
// live sandbox, or held by a session with a call in progress, is kept.
func (r *Runner) Cleanup(ctx context.Context, now time.Time, ttl time.Duration) (CleanupReport, error) {
	if ttl < 0 {
		ttl = r.cfg.VolumeTTL
	}
	rep := CleanupReport{Sandboxes: []string{}, Volumes: []string{}}
	reaped, err := r.ReapIdle(ctx, now)
	rep.Sandboxes = append(rep.Sandboxes, reaped...)
	if err != nil {
		return rep, err
	}
	inUse := map[string]bool{}
	err = r.withState(func(m map[string]*sessionState) error {
		for id, st := range m {
			if st.Sandbox != "" || isSpare(id) {
				inUse[st.Volume] = true
				continue
			}
			// A session with a call in progress is about to mount its volume.
			unlock, err := r.lockSession(id, false)
			if err != nil {
				return err
			}
			if unlock == nil {
				inUse[st.Volume] = true
				continue
			}
			unlock()
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	vols, err := r.store.Volumes(ctx)
	if err != nil {
		return rep, err
	}
	for _, v := range vols {
		gone, err := r.expireVolume(ctx, v, now, ttl, inUse[v.Name])
		if err != nil {
			return rep, err
		}
		if gone {
			rep.Volumes = append(rep.Volumes, v.Name)
		}
	}
	return rep, nil
}

// expireVolume deletes a registered volume, its registry row and its code modules
// when the volume is gone or unused for ttl: its last access is the later of the
// registry's (every run_code) and the engine's (every mount). A volume that a session
// holds (inUse) or a live sandbox mounts stays.
func (r *Runner) expireVolume(ctx context.Context, v docsearch.Volume, now time.Time, ttl time.Duration, inUse bool) (bool, error) {
	vs, err := r.volume(ctx, v.Name)
	if err != nil {
		return false, err
	}
	last := v.LastAccessed
	if vs.lastAccessed.After(last) {
		last = vs.lastAccessed
	}
	if vs.exists && (inUse || len(vs.usedBy) > 0 || now.Sub(last) < ttl) {
		return false, nil
	}
	if err := r.removeVolume(ctx, v.Name); errors.Is(err, engine.ErrInUse) {
		return false, nil // a sandbox mounted it since
	} else if err != nil {
		return false, err
	}
	if err := r.store.DeleteVolume(ctx, v.Name); err != nil {
		return false, err
	}
	err = r.withState(func(m map[string]*sessionState) error {
		for _, st := range m {
			if st.Volume == v.Name {
				st.Volume = "" // the next sandbox gets a new volume
			}
		}
		return nil
	})
	return err == nil, err
}
