package api

import (
	"log/slog"
	"slices"

	"github.com/gorilla/mux"
)

// RouteTemplates returns the path templates of the routes NewHandler
// serves that take method, as NewHandler builds them (a test hook).
func RouteTemplates(c Controller, method string, opts ...Option) []string {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	e := errorWriter{log: slog.New(slog.DiscardHandler)}
	root := routes(c, e, o)
	devices{svc: o.devices, errorWriter: e}.routes(root.PathPrefix("/v1/devices").Subrouter())
	var out []string
	_ = root.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		ms, err := route.GetMethods()
		tpl, terr := route.GetPathTemplate()
		if err == nil && terr == nil && slices.Contains(ms, method) {
			out = append(out, tpl)
		}
		return nil
	})
	return out
}
