package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/diskrotate"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/metadatakeys"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/version"
	"github.com/vmeta/vmeta/server"
)

// KeyRotationConfig is the key rotation policies of `hostctl serve`.
type KeyRotationConfig struct {
	// Policies are --key-rotation values (keyrotation.ParseFlag).
	Policies []string
	// Interval is how often the engine runs besides the runs a policy
	// change or a reconcile pass triggers.
	Interval time.Duration
}

// DefaultKeyRotationInterval is --key-rotation-interval's default.
const DefaultKeyRotationInterval = time.Minute

// AddFlags registers the key rotation flags.
func (c *KeyRotationConfig) AddFlags(fs *flag.FlagSet) {
	fs.Func("key-rotation", "a key class's rotation policy, CLASS=POLICY[,generation=N][,keep-prior=N] (repeatable; classes key-encryption-key, token-signing-key, proxy-secret, disk-passphrases; policies Disabled, WithVersionUpgrade, KeyGeneration); applied at start-up, never lowering a stored generation; 'hostctl keys policy' changes it at run time", func(s string) error {
		if _, _, err := keyrotation.ParseFlag(s); err != nil {
			return err
		}
		c.Policies = append(c.Policies, s)
		return nil
	})
	fs.DurationVar(&c.Interval, "key-rotation-interval", DefaultKeyRotationInterval, "how often due key rotations are looked for besides policy changes and reconcile passes (a stopped instance's pending disk rotation runs then)")
}

// applyPolicies stores the policies of the command line and the
// configuration file (parsed by the validation). A policy that would lower a stored generation stops
// the daemon (the operator's file is behind what was asked through the
// API: say so rather than guess which is meant).
func applyPolicies(ctx context.Context, e *keyrotation.Engine, policies []policyFlag) error {
	for _, f := range policies {
		if _, err := e.SetPolicy(ctx, keyrotation.Subject{Class: f.class}, f.policy); err != nil {
			if errors.Is(err, keyrotation.ErrDecrease) || errors.Is(err, keyrotation.ErrInvalid) {
				return configErrorf("--key-rotation %s: %w (raise it, or drop it and use `hostctl keys policy`)", f.flag, err)
			}
			return fmt.Errorf("--key-rotation %s: %w", f.flag, err)
		}
	}
	return nil
}

// runKeyRotation runs the engine until ctx is done: at once, then on
// every kick (a policy change, a reconcile pass) and every interval.
func runKeyRotation(ctx context.Context, e *keyrotation.Engine, reconciled <-chan struct{}, interval time.Duration, log *slog.Logger) {
	if interval <= 0 {
		interval = DefaultKeyRotationInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := e.Run(ctx); err != nil && ctx.Err() == nil {
			log.Warn("key rotation", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-e.Kicked():
		case <-reconciled:
		case <-t.C:
		}
	}
}

// kicker is a non-blocking signal (the controller's Reconciled hook).
type kicker chan struct{}

func (k kicker) kick() {
	select {
	case k <- struct{}{}:
	default:
	}
}

// instanceGetter resolves instance names for per-instance policies.
type instanceGetter interface {
	Instance(ctx context.Context, name string) (store.Instance, error)
}

// keyService is the admin API's keys resource: the engine, instance
// names, and the proxy secret's rotator.
type keyService struct {
	*keyrotation.Engine
	instances instanceGetter
	proxy     *metadatakeys.Proxy // nil without --metadata-proxy-secret-file
}

func (k keyService) InstanceSubject(ctx context.Context, c keyrotation.Class, name string) (keyrotation.Subject, error) {
	rec, err := k.instances.Instance(ctx, name)
	if err != nil {
		return keyrotation.Subject{}, fmt.Errorf("instance %s: %w", name, err)
	}
	return keyrotation.Subject{Class: c, InstanceUUID: rec.UUID, InstanceName: rec.Name}, nil
}

func (k keyService) RevealProxySecret(ctx context.Context) ([]byte, error) {
	if k.proxy == nil {
		return nil, fmt.Errorf("proxy secret: %w: this daemon has no --metadata-proxy-secret-file", store.ErrNotFound)
	}
	key, err := k.proxy.Current(ctx)
	if err != nil {
		return nil, fmt.Errorf("proxy secret: %w", err)
	}
	return key, nil
}

func newKeyEngine(st keyrotation.Store, host string, log *slog.Logger) *keyrotation.Engine {
	return keyrotation.New(st, keyrotation.Options{Host: host, Version: version.String(), Log: log})
}

// registerDiskRotation registers the disk passphrase rotator of ctl's
// instances (their records in st), whose disks are the disks part's
// (dp), with the key manager and the LUKS tool their disks were made
// with. (An instance's key rotation records go with it through the
// diskrotate.Forget part: parts.go.)
func registerDiskRotation(e *keyrotation.Engine, ctl *controller.Controller, st store.Store, dp *disks.Part, km *keys.Manager, luks *encryption.Tool, log *slog.Logger) {
	e.Register(keyrotation.Disk, diskrotate.New(ctl, st, dp, km, luks, log))
}

// luksTool is the LUKS tool of the controller's encrypted disks and of
// their passphrase rotation (one configuration for both).
func luksTool(cfg Config) *encryption.Tool {
	return encryption.New(encryption.Options{IterTime: cfg.LUKSIterTime})
}

// markKeyFilesCreated records generation 1, minted by this version, for
// the key files this start created (the token signing key), as
// keys.Open's Created does for the key-encryption key: every key vmeta
// creates starts at generation 1 with its minter known.
func markKeyFilesCreated(ctx context.Context, e *keyrotation.Engine, md server.Options) error {
	if f := md.KeyFile("token"); f != nil && f.Created() {
		if err := e.MarkCreated(ctx, keyrotation.Subject{Class: keyrotation.Token}); err != nil {
			return fmt.Errorf("key rotation status: %w", err)
		}
	}
	return nil
}
