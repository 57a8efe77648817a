package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/virt"
)

// Virt modes of `hostctl serve --virt`.
const (
	virtAuto    = "auto"
	virtLibvirt = "libvirt"
	virtNone    = "none"
)

// VirtEnv, when set, is the default of --virt (tests set it to none so
// that a daemon they start never reaches the host's libvirtd unless asked).
const VirtEnv = "VMETA_VIRT"

// DomainTypeEnv, when set, is the default of --domain-type (qemu or kvm):
// decide KVM by booting a guest, not by the presence of /dev/kvm.
const DomainTypeEnv = "VMETA_DOMAIN_TYPE"

// virtConfig is the daemon's hypervisor configuration: its flags, and the
// libvirt connection once connected.
type virtConfig struct {
	mode          string
	uri           string
	domainType    string
	network       string
	imageDir      string
	shareRoot     string
	memoryMiB     int
	vcpus         int
	driveBus      string
	kernel        string
	initrd        string
	cmdline       string
	detachTimeout time.Duration
	resync        time.Duration

	dom  virt.Options
	conn *virt.Conn
}

// addVirtFlags adds the hypervisor flags of `hostctl serve` to fs.
func addVirtFlags(fs *flag.FlagSet) *virtConfig {
	c := &virtConfig{}
	fs.StringVar(&c.mode, "virt", envOr(VirtEnv, virtAuto), "hypervisor: libvirt, none (addresses come from the spec), or auto (libvirt when its socket exists); default $"+VirtEnv+" or auto")
	fs.StringVar(&c.uri, "libvirt-uri", virt.DefaultURI, "libvirt URI (?socket=PATH selects another libvirtd socket)")
	fs.StringVar(&c.domainType, "domain-type", envOr(DomainTypeEnv, string(virt.TypeQEMU)), "domain type: qemu (TCG emulation, works everywhere) or kvm (only where a guest was seen to boot under KVM); default $"+DomainTypeEnv+" or qemu")
	fs.StringVar(&c.network, "libvirt-network", "default", "libvirt network of NICs whose spec names none")
	fs.StringVar(&c.imageDir, "image-dir", "", "directory of the base images a spec's image names (default DATA-DIR/images)")
	fs.StringVar(&c.shareRoot, "share-root", "", "directory the host directories of virtiofs shares must be in: a share's source is exported read-write to the guest (default DATA-DIR/shares)")
	fs.IntVar(&c.memoryMiB, "domain-memory", 512, "guest memory of each domain, MiB")
	fs.IntVar(&c.vcpus, "domain-vcpus", 1, "virtual CPUs of each domain")
	fs.StringVar(&c.driveBus, "config-drive-bus", "sata", "how the config drive is attached: sata (a cdrom, whose medium hostctl swaps when a running instance's metadata changes) or virtio (a read-only disk, for kernels without AHCI; a running guest sees a rebuilt drive only after a restart)")
	fs.StringVar(&c.kernel, "domain-kernel", "", "boot every domain from this kernel instead of its first disk (appliances, tests)")
	fs.StringVar(&c.initrd, "domain-initrd", "", "initrd for --domain-kernel")
	fs.StringVar(&c.cmdline, "domain-cmdline", "", "kernel command line for --domain-kernel")
	fs.DurationVar(&c.detachTimeout, "detach-timeout", 10*time.Second, "how long a live detach waits for the guest to release the device")
	fs.DurationVar(&c.resync, "reconcile-interval", time.Minute, "how often every instance is checked against libvirt besides on libvirt's events (0: only on events)")
	return c
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// connect checks the flags and, unless the mode resolves to none,
// connects to libvirtd (subscribed to domain events, reconnecting when
// libvirtd restarts). An unreachable libvirtd is an error for both
// --virt libvirt and --virt auto with the socket present: a daemon that
// silently ran without its hypervisor would publish the wrong addresses.
func (c *virtConfig) connect(ctx context.Context, log *slog.Logger) error {
	typ, err := virt.ParseDomainType(c.domainType)
	if err != nil {
		return fmt.Errorf("%w: --domain-type: %v", errUsage, err)
	}
	switch c.driveBus {
	case "sata", "virtio":
	default:
		return fmt.Errorf("%w: --config-drive-bus %q: must be sata or virtio", errUsage, c.driveBus)
	}
	if c.memoryMiB <= 0 || c.vcpus <= 0 {
		return fmt.Errorf("%w: --domain-memory and --domain-vcpus must be positive", errUsage)
	}
	if (c.initrd != "" || c.cmdline != "") && c.kernel == "" {
		return fmt.Errorf("%w: --domain-initrd and --domain-cmdline need --domain-kernel", errUsage)
	}
	c.dom = virt.Options{
		Type: typ, MemoryMiB: c.memoryMiB, VCPUs: c.vcpus, DefaultNetwork: c.network,
		ConfigDriveBus: c.driveBus, Kernel: c.kernel, Initrd: c.initrd, Cmdline: c.cmdline,
	}
	mode := c.mode
	switch mode {
	case virtNone:
		log.Info("no hypervisor (--virt none): device addresses come from the spec")
		return nil
	case virtLibvirt:
	case virtAuto:
		sock, unix := socketOf(c.uri)
		if unix {
			if _, err := os.Stat(sock); err != nil {
				log.Info("no libvirtd socket; running without a hypervisor (--virt auto)", "socket", sock)
				return nil
			}
		}
		mode = virtLibvirt
	default:
		return fmt.Errorf("%w: --virt %q: must be auto, libvirt or none", errUsage, c.mode)
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := virt.Connect(cctx, c.uri, virt.ConnOptions{Events: true, Logger: log})
	if err != nil {
		return fmt.Errorf("--virt %s: %w", c.mode, err)
	}
	v, err := conn.Version(cctx)
	if err != nil {
		conn.Close()
		return fmt.Errorf("--virt %s: %w", c.mode, err)
	}
	c.conn = conn
	log.Info("hypervisor: libvirt", "uri", c.uri, "libvirt", v, "domain_type", typ, "network", c.network)
	return nil
}

// options adds the hypervisor to the controller's options (none for
// --virt none).
func (c *virtConfig) options(o controller.Options) controller.Options {
	if c.conn == nil {
		return o
	}
	o.Hypervisor = c.conn
	o.Domain = c.dom
	o.ImageDir = c.imageDir
	o.ShareRoot = c.shareRoot
	o.DetachTimeout = c.detachTimeout
	o.ResyncInterval = c.resync
	if c.resync == 0 {
		o.ResyncInterval = -1
	}
	return o
}

// close disconnects from libvirtd.
func (c *virtConfig) close() {
	if c.conn != nil {
		_ = c.conn.Close()
	}
}

// socketOf returns the unix socket a libvirt URI uses, and whether it
// uses one at all (qemu+tcp, qemu+ssh, ... do not).
func socketOf(uri string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", false
	}
	scheme := strings.SplitN(u.Scheme, "+", 2)
	if !(len(scheme) == 1 && u.Host == "") && !(len(scheme) == 2 && scheme[1] == "unix") {
		return "", false
	}
	if s := u.Query().Get("socket"); s != "" {
		return s, true
	}
	return virt.DefaultSocket, true
}
