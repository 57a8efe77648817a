package controller

import (
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/internal/model"
)

// hasKinds reports whether in's disks were laid out by a flavor
// (layout.HasKinds).
func hasKinds(in *model.Instance) bool { return layout.HasKinds(in) }
