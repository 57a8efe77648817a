package types

// InstanceSpec is an instance spec as the admin API shows it (the "spec"
// of an Instance): the spec's field names, as an operator writes them
// (internal/model holds the model and its rules; hostctl/api converts).
type InstanceSpec struct {
	Name             string `json:"name"`
	UUID             string `json:"uuid,omitempty"`
	Hostname         string `json:"hostname,omitempty"`
	ProjectID        string `json:"project_id,omitempty"`
	AvailabilityZone string `json:"availability_zone,omitempty"`
	LaunchIndex      int    `json:"launch_index,omitempty"`
	Flavor           string `json:"flavor,omitempty"`
	Image            string `json:"image,omitempty"`
	VCPUs            int    `json:"vcpus,omitempty"`
	MemoryMiB        int    `json:"memory_mib,omitempty"`
	// Addresses are the source addresses the guest uses to reach the
	// metadata service.
	Addresses  []string          `json:"addresses,omitempty"`
	Meta       map[string]string `json:"meta,omitempty"`
	PublicKeys []PublicKey       `json:"public_keys,omitempty"`
	UserData   string            `json:"user_data,omitempty"`
	VendorData map[string]any    `json:"vendor_data,omitempty"`
	Files      []File            `json:"files,omitempty"`
	// DedicatedCPUs are host CPU ids pinned to the guest.
	DedicatedCPUs []int `json:"dedicated_cpus,omitempty"`
	// ConfigDrive: nil means yes.
	ConfigDrive *bool           `json:"config_drive,omitempty"`
	Disks       []Disk          `json:"disks,omitempty"`
	NICs        []NIC           `json:"nics,omitempty"`
	Shares      []InstanceShare `json:"shares,omitempty"`
	PCIDevices  []PCIDevice     `json:"pci_devices,omitempty"`
	PCIAliases  []PCIAlias      `json:"pci_aliases,omitempty"`
}

// PublicKey is an SSH key pair's public half.
type PublicKey struct {
	Name string `json:"name"`
	Type string `json:"type,omitempty"`
	Data string `json:"data"`
}

// File is a file injected through the config drive.
type File struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Disk is a block device of an instance spec.
type Disk struct {
	Name             string `json:"name"`
	Bus              string `json:"bus,omitempty"`
	Kind             string `json:"kind,omitempty"`
	Address          string `json:"address,omitempty"`
	Serial           string `json:"serial,omitempty"`
	Tag              string `json:"tag,omitempty"`
	Size             string `json:"size,omitempty"`
	Encrypted        bool   `json:"encrypted,omitempty"`
	EncryptionFormat string `json:"encryption_format,omitempty"`
}

// NIC is a network interface of an instance spec.
type NIC struct {
	MAC       string     `json:"mac"`
	Bus       string     `json:"bus,omitempty"`
	Address   string     `json:"address,omitempty"`
	Tag       string     `json:"tag,omitempty"`
	Network   string     `json:"network,omitempty"`
	VLAN      *int       `json:"vlan,omitempty"`
	VFTrusted bool       `json:"vf_trusted,omitempty"`
	MTU       int        `json:"mtu,omitempty"`
	IPs       []IPConfig `json:"ips,omitempty"`
}

// IPConfig is one static address of a NIC.
type IPConfig struct {
	Address string   `json:"address"`
	Gateway string   `json:"gateway,omitempty"`
	DNS     []string `json:"dns,omitempty"`
}

// InstanceShare is a share attached to an instance through virtiofs.
type InstanceShare struct {
	ShareID string `json:"share_id"`
	Tag     string `json:"tag,omitempty"`
	Source  string `json:"source,omitempty"`
}

// PCIDevice is a passthrough device of an instance.
type PCIDevice struct {
	Address      string `json:"address"`
	OneTimeUse   bool   `json:"one_time_use,omitempty"`
	Alias        string `json:"alias,omitempty"`
	Tag          string `json:"tag,omitempty"`
	GuestAddress string `json:"guest_address,omitempty"`
}

// PCIAlias requests Count devices of the host's device_spec alias Name.
type PCIAlias struct {
	Name  string `json:"name"`
	Count int    `json:"count,omitempty"`
	Tag   string `json:"tag,omitempty"`
}

// GuestDevice is one entry of the devices list the guest sees (device
// role tagging, as meta_data.json "devices" at "latest").
type GuestDevice struct {
	Type      string   `json:"type"`
	Bus       string   `json:"bus"`
	Address   string   `json:"address"`
	MAC       string   `json:"mac,omitempty"`
	Serial    string   `json:"serial,omitempty"`
	Path      string   `json:"path,omitempty"`
	Tags      []string `json:"tags,omitempty"`
	VLAN      *int     `json:"vlan,omitempty"`
	VFTrusted *bool    `json:"vf_trusted,omitempty"`
	Encrypted *bool    `json:"encrypted,omitempty"`
	ShareID   string   `json:"share_id,omitempty"`
	Tag       string   `json:"tag,omitempty"`
}
