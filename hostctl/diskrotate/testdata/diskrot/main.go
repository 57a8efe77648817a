// Command diskrot runs hostctl's disk passphrase rotation as the daemon
// would: the diskrotate.Rotator registered in a keyrotation Engine, start-up
// recovery, then (with -gen) a run for the policy KeyGeneration=gen of
// the disk class; it prints the instance's status. The crash-matrix test builds it with -tags vmetacrash
// and kills it at each step (VMETA_CRASH_AT).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/diskrotate"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storeurl"
)

func main() {
	storeURL := flag.String("store", "", "store URL")
	dataDir := flag.String("data", "", "data directory")
	uri := flag.String("libvirt", "qemu:///system", "libvirt URI")
	name := flag.String("instance", "", "instance name")
	uuid := flag.String("uuid", "", "instance UUID")
	gen := flag.Int64("gen", 0, "generation to rotate to (0: recover only)")
	flag.Parse()
	if err := run(*storeURL, *dataDir, *uri, *name, *uuid, *gen); err != nil {
		fmt.Fprintln(os.Stderr, "diskrot:", err)
		os.Exit(1)
	}
}

func run(storeURL, dataDir, uri, name, uuid string, gen int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := storeurl.Open(ctx, storeURL, storeurl.WithDataDir(dataDir))
	if err != nil {
		return err
	}
	defer st.Close()
	km, err := keys.Open(ctx, st, dataDir, keys.Options{Host: "local"})
	if err != nil {
		return err
	}
	conn, err := virt.Connect(ctx, uri, virt.ConnOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer conn.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	luks := encryption.New(encryption.Options{IterTime: 20 * time.Millisecond})
	// The disks part as the daemon wires it (no states part here).
	recs, _ := st.(store.Records)
	imgs := images.New(filepath.Join(dataDir, "images"), images.Options{})
	dp := disks.New(disks.Options{Keys: km, LUKS: luks, Secrets: conn, Records: recs, Instances: st, Catalog: imgs,
		DataDir: dataDir, Logger: log})
	c := controller.New(st, controller.Options{DataDir: dataDir, Logger: log, Hypervisor: conn, Images: imgs,
		Parts: []part.Part{dp}})
	dp.Bind(c, nil)
	// As the daemon wires it: the rotator registered in the Engine,
	// recovery first, then a run for the disk class's policy.
	e := keyrotation.New(st, keyrotation.Options{Host: "local", Version: "v0.0.0-test", Log: log})
	e.Register(keyrotation.Disk, diskrotate.New(c, st, dp, km, luks, log))
	if err := e.Recover(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if gen == 0 {
		return nil
	}
	if _, err := e.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.Disk}, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: gen}); err != nil {
		return err
	}
	if err := e.Run(ctx); err != nil {
		return err
	}
	st2, err := e.Status(ctx, keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: uuid, InstanceName: name})
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(st2)
}
