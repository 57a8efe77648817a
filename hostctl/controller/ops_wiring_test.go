package controller_test

import (
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/ops"
)

// The tests of package controller drive shelve, rescue, resize, rebuild,
// snapshot, reboot and the hot-plug of disks and NICs through hostctl/ops over the controller under test (see
// export_ops_test.go).
func init() {
	controller.SetOperations(func(c *controller.Controller) controller.Operations { return ops.New(c) }, ops.ShelvedImageName)
}
