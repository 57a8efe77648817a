package controller

// NewStopped is New without starting the reconciler: for start-up work
// that must run before the reconciler acts on any instance (the disk
// passphrase rotator's Recover, hostctl/diskrotate). StartReconciler
// starts it afterwards:
//
//	c := controller.NewStopped(st, opts)
//	if err := diskrotate.New(c, st, dp, km, luks, log).Recover(ctx); err != nil { … }
//	c.StartReconciler()
func NewStopped(st Store, opts Options) *Controller { return newController(st, opts) }

// StartReconciler starts the reconciler of a controller made by
// NewStopped (once; Close stops it).
func (c *Controller) StartReconciler() { c.drv.startReconciler() }
