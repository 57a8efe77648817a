package daemon

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
	hostmetrics "github.com/vmeta/vmeta/hostctl/metrics"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/firmware"
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

// VirtConfig is the daemon's hypervisor configuration (AddFlags).
type VirtConfig struct {
	Mode          string
	URI           string
	DomainType    string
	Network       string
	ImageDir      string
	ShareRoot     string
	MemoryMiB     int
	VCPUs         int
	DriveBus      string
	Kernel        string
	Initrd        string
	Cmdline       string
	DetachTimeout time.Duration
	Resync        time.Duration
	// Firmware is --firmware-metadata: auto, on or off.
	Firmware string
}

// Defaults of the hypervisor flags that are not spelled out in AddFlags'
// calls.
const (
	// DefaultDetachTimeout is how long a live detach waits for the guest.
	DefaultDetachTimeout = 10 * time.Second
	// DefaultReconcileInterval is how often every instance is checked
	// against libvirt besides on its events.
	DefaultReconcileInterval = time.Minute
	// connectTimeout bounds connecting to libvirtd at start-up.
	connectTimeout = 15 * time.Second
)

// AddFlags adds the hypervisor flags of `hostctl serve` to fs.
func (c *VirtConfig) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Mode, "virt", envOr(VirtEnv, virtAuto), "hypervisor: libvirt, none (addresses come from the spec), or auto (libvirt when its socket exists); default $"+VirtEnv+" or auto")
	fs.StringVar(&c.URI, "libvirt-uri", virt.DefaultURI, "libvirt URI (?socket=PATH selects another libvirtd socket)")
	fs.StringVar(&c.DomainType, "domain-type", envOr(DomainTypeEnv, string(virt.TypeQEMU)), "domain type: qemu (TCG emulation, works everywhere) or kvm (only where a guest was seen to boot under KVM); default $"+DomainTypeEnv+" or qemu")
	fs.StringVar(&c.Network, "libvirt-network", "default", "libvirt network of NICs whose spec names none")
	fs.StringVar(&c.ImageDir, "image-dir", "", "directory of the base images a spec's image names (default DATA-DIR/images)")
	fs.StringVar(&c.ShareRoot, "share-root", "", "directory the host directories of virtiofs shares must be in: a share's source is exported read-write to the guest (default DATA-DIR/shares)")
	fs.IntVar(&c.MemoryMiB, "domain-memory", 512, "guest memory of each domain, MiB")
	fs.IntVar(&c.VCPUs, "domain-vcpus", 1, "virtual CPUs of each domain")
	fs.StringVar(&c.DriveBus, "config-drive-bus", "sata", "how the config drive is attached: sata (a cdrom, whose medium hostctl swaps when a running instance's metadata changes) or virtio (a read-only disk, for kernels without AHCI; a running guest sees a rebuilt drive only after a restart)")
	fs.StringVar(&c.Kernel, "domain-kernel", "", "boot every domain from this kernel instead of its first disk (appliances, tests)")
	fs.StringVar(&c.Initrd, "domain-initrd", "", "initrd for --domain-kernel")
	fs.StringVar(&c.Cmdline, "domain-cmdline", "", "kernel command line for --domain-kernel")
	fs.DurationVar(&c.DetachTimeout, "detach-timeout", DefaultDetachTimeout, "how long a live detach waits for the guest to release the device")
	fs.StringVar(&c.Firmware, "firmware-metadata", "auto", "also hand each instance's devices, uuid and metadata revision to its guest through QEMU's firmware configuration device (fw_cfg; read at boot without a mount or a network): on, off (for guests that must not see it), or auto (on when libvirt supports it, 6.5 and later)")
	fs.DurationVar(&c.Resync, "reconcile-interval", DefaultReconcileInterval, "how often every instance is checked against libvirt besides on libvirt's events (0: only on events)")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// hypervisor is the daemon's libvirt connection (nil without one) and the
// domain options of its configuration.
type hypervisor struct {
	cfg  VirtConfig
	dom  virt.Options
	conn *virt.Conn
	// firmware is --firmware-metadata resolved against libvirt's version.
	firmware bool
}

// check checks the hypervisor flags and returns the hypervisor they
// describe, not connected yet (connect).
func (c VirtConfig) check() (*hypervisor, error) {
	typ, err := virt.ParseDomainType(c.DomainType)
	if err != nil {
		return nil, configErrorf("--domain-type: %w", err)
	}
	switch c.DriveBus {
	case "sata", "virtio":
	default:
		return nil, configErrorf("--config-drive-bus %q: must be sata or virtio", c.DriveBus)
	}
	if c.MemoryMiB <= 0 || c.VCPUs <= 0 {
		return nil, configErrorf("--domain-memory and --domain-vcpus must be positive")
	}
	if (c.Initrd != "" || c.Cmdline != "") && c.Kernel == "" {
		return nil, configErrorf("--domain-initrd and --domain-cmdline need --domain-kernel")
	}
	switch c.Firmware {
	case "auto", "on", "off":
	default:
		return nil, configErrorf("--firmware-metadata %q: must be auto, on or off", c.Firmware)
	}
	switch c.Mode {
	case virtNone, virtLibvirt, virtAuto:
	default:
		return nil, configErrorf("--virt %q: must be auto, libvirt or none", c.Mode)
	}
	if c.DetachTimeout < 0 {
		return nil, configErrorf("--detach-timeout %s: must not be negative", c.DetachTimeout)
	}
	if c.Resync < 0 {
		return nil, configErrorf("--reconcile-interval %s: must not be negative", c.Resync)
	}
	return &hypervisor{cfg: c, dom: virt.Options{
		Type: typ, MemoryMiB: c.MemoryMiB, VCPUs: c.VCPUs, DefaultNetwork: c.Network,
		ConfigDriveBus: c.DriveBus, Kernel: c.Kernel, Initrd: c.Initrd, Cmdline: c.Cmdline,
	}}, nil
}

// connect connects to libvirtd (subscribed to domain events,
// reconnecting when libvirtd restarts) unless the mode resolves to none.
// An unreachable libvirtd is an error for both --virt libvirt and --virt
// auto with the socket present: a daemon that silently ran without its
// hypervisor would publish the wrong addresses.
func (h *hypervisor) connect(ctx context.Context, log *slog.Logger) error {
	c := h.cfg
	switch c.Mode {
	case virtNone:
		log.Info("no hypervisor (--virt none): device addresses come from the spec")
		return nil
	case virtAuto:
		sock, unix := socketOf(c.URI)
		if unix {
			if _, err := os.Stat(sock); err != nil {
				log.Info("no libvirtd socket; running without a hypervisor (--virt auto)", "socket", sock)
				return nil
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := virt.Connect(cctx, c.URI, virt.ConnOptions{Events: true, Logger: log})
	if err != nil {
		return fmt.Errorf("--virt %s: %w", c.Mode, err)
	}
	v, err := conn.Version(cctx)
	if err != nil {
		conn.Close()
		return fmt.Errorf("--virt %s: %w", c.Mode, err)
	}
	if h.firmware, err = firmwareSetting(c.Firmware, v); err != nil {
		conn.Close()
		return err
	}
	h.conn = conn
	log.Info("hypervisor: libvirt", "uri", c.URI, "libvirt", v, "domain_type", h.dom.Type, "network", c.Network, "firmware_metadata", h.firmware)
	return nil
}

// firmwareSetting resolves --firmware-metadata against libvirtd's
// version: auto is on where libvirt has <sysinfo type='fwcfg'>; on with
// an older libvirt is refused.
func firmwareSetting(mode, libvirtVersion string) (bool, error) {
	ok := virt.VersionAtLeast(libvirtVersion, virt.MinFirmwareLibVersion)
	switch mode {
	case "off":
		return false, nil
	case "auto":
		return ok, nil
	case "on":
		if !ok {
			return false, configErrorf("--firmware-metadata on: libvirt %s has no <sysinfo type='fwcfg'> (it needs %s or later); use auto or off", libvirtVersion, virt.MinFirmwareLibVersion)
		}
		return true, nil
	}
	return false, configErrorf("--firmware-metadata %q: must be auto, on or off", mode)
}

// options adds the hypervisor to the controller's options (none for
// --virt none).
func (h *hypervisor) options(o controller.Options) controller.Options {
	if h.conn == nil {
		return o
	}
	o.Hypervisor = h.conn
	o.Domain = h.dom
	o.ShareRoot = h.cfg.ShareRoot
	o.DetachTimeout = h.cfg.DetachTimeout
	return o
}

// metricSources adds the libvirt connection state to hostctl's metrics
// (none for --virt none).
func (h *hypervisor) metricSources(s hostmetrics.Sources) hostmetrics.Sources {
	if h.conn != nil {
		s.LibvirtConnected = h.conn.Connected
	}
	return s
}

// firmwarePart is the firmware transport (hostctl/parts/firmware) over
// the hypervisor, for the instance directories of dataDir, as
// --firmware-metadata resolved; none for --virt none.
func (h *hypervisor) firmwarePart(dataDir string, log *slog.Logger) []part.Part {
	if h.conn == nil {
		return nil
	}
	return []part.Part{firmware.New(h.conn, dataDir, h.firmware, log)}
}

// close disconnects from libvirtd.
func (h *hypervisor) close() {
	if h.conn != nil {
		_ = h.conn.Close()
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
