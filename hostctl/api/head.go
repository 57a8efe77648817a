package api

import (
	"net/http"

	"github.com/gorilla/mux"
)

// headAsGet answers HEAD on a path a GET route takes with that route, as
// net/http's ServeMux does for its GET patterns (and as this API did
// before gorilla/mux, whose routes match only the methods they name): the
// handler runs with the request's method HEAD and the server sends the
// status and headers a GET gets, without the body. Any other request,
// and a HEAD no GET route takes, goes to next (unmatched: 404, or 405
// with Allow). It is the router's not-found handler, so the routes stay
// as they are written and a GET route added later is covered.
func headAsGet(root *mux.Router, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			probe := r.Clone(r.Context())
			probe.Method = http.MethodGet
			var match mux.RouteMatch
			if root.Match(probe, &match) && match.MatchErr == nil {
				// match.Handler has the matched subrouters' middlewares
				// (the project scoping of /v1/instances/{name}); the
				// route's variables are set as the router sets them.
				match.Handler.ServeHTTP(w, mux.SetURLVars(r, match.Vars))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
