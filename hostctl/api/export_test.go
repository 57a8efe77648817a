package api

import (
	"log/slog"
	"slices"

	"github.com/gorilla/mux"
)

// RouteTemplates returns the path templates of the routes NewHandler
// serves that take method, as NewHandler builds them (a test hook).
func RouteTemplates(s Services, method string) []string {
	e := errorWriter{log: slog.New(slog.DiscardHandler)}
	root := routes(s, e)
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
