package api

import (
	"net/http"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// EventSource feeds GET /api/events.
type EventSource interface {
	// Subscribe returns a channel of events and a function that ends the
	// subscription; the channel is closed when the source drops the subscriber.
	Subscribe() (<-chan apitype.Event, func())
}

// eventsKeepAlive is how often an idle event stream gets a comment line, so
// proxies keep it open.
var eventsKeepAlive = 15 * time.Second

// events streams service state changes as SSE until the client leaves or the server shuts down.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Events == nil {
		return errNotImplemented
	}
	end, err := s.openStream(w, r)
	if err != nil {
		return err
	}
	defer end()
	ctx, cancel := s.streamContext(r)
	defer cancel()
	ch, unsubscribe := s.opts.Events.Subscribe()
	defer unsubscribe()
	sse := startSSE(w)
	tick := time.NewTicker(eventsKeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return nil
			}
			if err := sse.data(ev); err != nil {
				return nil // the client went away
			}
		case <-tick.C:
			if err := sse.comment("keep-alive"); err != nil {
				return nil
			}
		}
	}
}
