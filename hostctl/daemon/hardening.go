package daemon

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/version"
)

// addHardeningFlags registers the flags of the store's password, the
// empty-store override and the admin socket's group.
func (c *Config) addHardeningFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.StorePasswordFile, "store-password-file", "", "file holding the store's password (first line), instead of a password in the --store URL, which every user sees on the command line; without it $"+storeurl.PasswordEnv+" is used when set")
	fs.BoolVar(&c.InitEmptyStore, "init-empty-store", false, "start even though the store holds nothing of this host while the data directory shows it had one (key file, host-name, instance directories): only for an operator who means to start over on a new store")
	fs.StringVar(&c.SocketGroup, "socket-group", "", "group whose members may use the admin socket besides root (socket mode 0660); default: root and the daemon's own user only (0600)")
}

// openStore opens the configured store with its password (read by the
// validation from --store-password-file or the environment), warning
// loudly about a password in the URL.
func (c *Config) openStore(ctx context.Context, pw string, log *slog.Logger) (store.Store, error) {
	if storeurl.URLHasPassword(c.Store) {
		log.Warn(storeurl.PasswordWarning, "store", storeurl.Redact(c.Store))
	}
	st, err := storeurl.Open(ctx, c.Store, storeurl.WithDataDir(c.DataDir), storeurl.WithPassword(pw))
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return st, nil
}

// holdHost takes the host name's lease in the store (hosts.Holder): a
// first heartbeat naming this process, refused while another live
// process holds the name.
func holdHost(ctx context.Context, st hosts.Records, host string, cfg Config) (*hosts.Holder, error) {
	h := hosts.NewHolder(cfg.DataDir)
	b := &hosts.Beater{Store: st, Host: host, Version: version.String(), Holder: h, DownAfter: cfg.HostDownAfter}
	if err := b.Beat(ctx); err != nil {
		return nil, fmt.Errorf("host name: %w", err)
	}
	return h, nil
}
