// Package diskrotate rotates the LUKS passphrases of a host's encrypted
// disks for the key-rotation engine (hostctl/keyrotation, class
// keyrotation.Disk, one subject per instance), in place through LUKS key
// slots — no data is re-encrypted.
//
// Per encrypted disk of a stopped instance (root, ephemeral, swap and
// every other LUKS disk), to generation G:
//
//	pending-stored   a new passphrase is persisted, wrapped, as the secret's pending one (keys.SetPending)
//	slot-chosen      a free LUKS key slot N is chosen (qemu-img info) and recorded with G in the
//	                 disk's block-device record (its key_rotation journal)
//	slot-added       the pending passphrase is added to slot N (qemu-img amend, unlocking with the current one)
//	verified         the pending passphrase is proven to open the disk (qemu-io read)
//	promoted         it becomes the current one in the key manager (keys.Promote: one record write)
//	libvirt-updated  a libvirt secret defined for the disk gets the new value (same UUID: libvirt allows
//	                 one secret per usage id, so there is no secret per generation)
//	old-erased       every other active key slot is erased (unlocking with the new passphrase)
//	recorded         the record gets key_generation G and key_slot N, the journal is dropped
//
// At every step one stored passphrase opens the disk: until promoted the
// current one (its slot is erased only after the promotion), from then
// on the new one (in slot N, verified before the promotion). A Rotate
// called again after a crash or an error continues from the record: an
// existing pending passphrase is reused (never a second one for G), a
// slot already written is not written again, and after the promotion
// only the last steps run. Disk passphrases rotate in place: prior
// passphrases are never kept (keyrotation.Policy.Check refuses
// keepPriorKeyCount for this class), so every old slot is erased.
//
// Not rotated: the encrypted backing file of a disk over an encrypted
// image (backing_encryption_secret_uuid) — it is the image's file, shared
// by every instance made from it; its passphrase is the image's and
// rotates with the image. Its copy is only used to open the chain.
//
// A running instance's disks are not rotated (qemu-img amend needs the
// image unlocked by any QEMU; live amend through QMP x-blockdev-amend is
// still experimental in QEMU 7.2 and not used): Rotate reports it pending
// and the next call after it stops rotates it. Rotate holds the
// instance's lock, so the instance cannot start in the middle.
//
// What the rotator needs of the controller core — this host's
// instances, the per-instance lock, whether a domain runs — is the Core
// interface, which *controller.Controller implements; what it needs of
// the disks part (hostctl/parts/disks) — the block-device records and
// libvirt's copies of the passphrases — is the Disks interface, which
// *disks.Part implements; the key manager and the LUKS tool are handed to
// New. The controller does not import this package: the daemon
// (hostctl/daemon) wires it, with the keyrotation Engine:
//
//	ctl := controller.New(ctlStore, opts) // dp is among opts.Parts
//	keyEngine.Register(keyrotation.Disk, diskrotate.New(ctl, st, dp, km, luks, log))
//	if err := keyEngine.Recover(ctx); err != nil { … } // runs Rotator.Recover
//	rc := reconcile.New(ctl, reconcileOpts) // hostctl/reconcile
//	rc.Start()
//
// Recover must run before anything starts an instance (the API is not
// served yet): the daemon starts the reconciler after it. (Alongside it
// would be safe too — both take the instance's lock, and the reconciler
// only removes libvirt secrets of stopped domains — but the order is
// the one the design asks for.) The Rotator is the class's Rotator, Lister
// (Subjects: this host's instances with encrypted disks, Created = the
// oldest disk's creation) and Recoverer.
//
// The key rotation records of an instance (its policy and status,
// keyrotation/<host>/…/disk-passphrases/<uuid>) go with it: Forget is a
// host part (hostctl/part) whose AfterDelete deletes them
// (Engine.ForgetInstance) once a delete or a force delete removed the
// instance's record; the daemon registers it with the other parts.
package diskrotate
