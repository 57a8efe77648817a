package metrics_test

import (
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/metrics"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

func goldenSources(a *controller.Controller, _ *bolt.Store) metrics.Sources {
	return metrics.Sources{Instances: a}
}
