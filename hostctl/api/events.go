package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/internal/clip"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

// MaxEventWait bounds ?wait= of GET /v1/events/{stream}: a follower asks
// again after it.
const MaxEventWait = 60 * time.Second

// maxEventLimit bounds ?limit=.
const maxEventLimit = 1000

// EventService reads the audit streams (events.Log): up to limit events
// of stream after the one with ID after, waiting up to wait for one when
// there are none; with an error, the events that could be read.
type EventService interface {
	Read(ctx context.Context, stream, after string, limit int, wait time.Duration) ([]events.Event, error)
}

// auditEvents is GET /v1/events/{stream}?after=ID&limit=N&wait=DURATION:
// the events of an audit stream ("shares", "devices") after the one with
// ID after (from the first without it), oldest first, waiting up to wait
// (at most MaxEventWait) when there are none yet: a long poll followers
// repeat with the last ID they saw. For administrators only.
type auditEvents struct {
	svc EventService
	errorWriter
}

func (h auditEvents) routes(r *mux.Router) {
	r.HandleFunc("/{stream}", h.read).Methods(http.MethodGet)
}

func (h auditEvents) read(w http.ResponseWriter, r *http.Request) {
	if principalFrom(r.Context()).Role != types.RoleAdmin {
		h.fail(w, r, errkind.Errorf(errkind.Forbidden, "only an administrator may read audit events"))
		return
	}
	stream := mux.Vars(r)["stream"]
	if err := store.CheckStream(stream); err != nil {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "%v", err))
		return
	}
	q := r.URL.Query()
	if after := q.Get("after"); !validEventID(after) {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "after: %q: not an event ID (digits, or digits-digits)", after))
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxEventLimit {
			h.fail(w, r, errkind.Errorf(errkind.Invalid, "limit: %q: must be a whole number from 1 to %d", v, maxEventLimit))
			return
		}
		limit = n
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxEventWait {
			h.fail(w, r, errkind.Errorf(errkind.Invalid, "wait: %q: must be a duration from 0s to %s", v, MaxEventWait))
			return
		}
		wait = d
	}
	evs, err := h.svc.Read(r.Context(), stream, q.Get("after"), limit, wait)
	if err != nil && len(evs) == 0 {
		if errors.Is(err, context.Canceled) {
			return // the follower went away
		}
		h.fail(w, r, err)
		return
	}
	if err != nil {
		// Entries that are not events are logged; the ones that are
		// still reach the follower.
		h.log.Warn("audit stream has entries that are not events", "stream", clip.String(stream, clip.Log), "err", err)
	}
	out := make([]types.Event, len(evs))
	for i, e := range evs {
		out[i] = types.Event(e)
	}
	writeJSON(w, http.StatusOK, out)
}

// validEventID reports whether id has the form of a stream position: ""
// (the start), N (a line of a file stream) or N-M (a Redis stream ID).
func validEventID(id string) bool {
	if id == "" {
		return true
	}
	ms, seq, found := strings.Cut(id, "-")
	if _, err := strconv.ParseUint(ms, 10, 64); err != nil {
		return false
	}
	if found {
		if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
			return false
		}
	}
	return true
}
