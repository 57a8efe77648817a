// Command kekrotate runs one KEK rotation the way hostctl does (open the
// store and the key manager, RotateKEK to a generation) for the crash
// tests of package keys: built with -tags vmetacrash, it dies by SIGKILL
// at the step VMETA_CRASH_AT names.
//
//	kekrotate -store URL -data DIR -host NAME -gen N [-batch N]
//
// It prints the result as JSON and exits 0, or prints the error and exits
// 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store/storeurl"
)

func main() {
	storeURL := flag.String("store", "", "store URL (bolt:///path or redis://…)")
	dataDir := flag.String("data", "", "data directory with the key file")
	host := flag.String("host", "local", "host name")
	gen := flag.Int64("gen", 2, "generation to rotate to")
	batch := flag.Int("batch", 0, "secrets per batch (0: default)")
	flag.Parse()
	if err := run(*storeURL, *dataDir, *host, *gen, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "kekrotate:", err)
		os.Exit(1)
	}
}

func run(storeURL, dataDir, host string, gen int64, batch int) error {
	ctx := context.Background()
	st, err := storeurl.Open(ctx, storeURL, storeurl.WithDataDir(dataDir))
	if err != nil {
		return err
	}
	defer st.Close()
	m, err := keys.Open(ctx, st, dataDir, keys.Options{Host: host, RotateBatch: batch})
	if err != nil {
		return err
	}
	res, err := m.RotateKEK(ctx, gen, func(done, total int) {
		fmt.Fprintf(os.Stderr, "rewrapped %d/%d\n", done, total)
	})
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}
