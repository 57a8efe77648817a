// Command diskrot runs hostctl's disk passphrase rotation for one
// instance, as the daemon would: start-up recovery, then the rotation to
// a generation. The crash-matrix test builds it with -tags vmetacrash
// and kills it at each step (VMETA_CRASH_AT).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
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
	c := controller.NewStopped(st, controller.Options{DataDir: dataDir, Logger: log, Hypervisor: conn, Keys: km,
		LUKS: encryption.New(encryption.Options{IterTime: 20 * time.Millisecond})})
	defer c.Close()
	r := controller.NewDiskRotator(c)
	if err := r.Recover(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if gen == 0 {
		return nil
	}
	res, err := r.Rotate(ctx, keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: uuid, InstanceName: name}, gen, 0, nil)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}
