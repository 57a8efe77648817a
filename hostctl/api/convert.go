package api

import (
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	devinv "github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/encryption"
	flavorreg "github.com/vmeta/vmeta/hostctl/flavors"
	hostreg "github.com/vmeta/vmeta/hostctl/hosts"
	imagecat "github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
)

// The API's edge: the feature packages' domain structs to and from the
// wire types of hostctl/api/types (a leaf package clients link). The
// conversions of structs with the same fields are Go conversions, so a
// field added on one side only fails to compile here: a response body
// changes only on purpose.

func wireInstance(in *controller.Instance) *types.Instance {
	if in == nil {
		return nil
	}
	out := &types.Instance{
		Spec: wireSpec(in.Spec), Revision: in.Revision, DocumentVersion: in.DocumentVersion, ConfigDrive: in.ConfigDrive,
		Host: in.Host, State: in.State, Fault: in.Fault, Warnings: in.Warnings,
	}
	if in.Devices != nil {
		out.Devices = make([]types.GuestDevice, len(in.Devices))
		for i, d := range in.Devices {
			out.Devices[i] = wireGuestDevice(d)
		}
	}
	for _, t := range in.Transports {
		out.Transports = append(out.Transports, types.Transport(t))
	}
	for _, bd := range in.BlockDevices {
		out.BlockDevices = append(out.BlockDevices, wireBlockDevice(bd))
	}
	for _, d := range in.HostDevices {
		out.HostDevices = append(out.HostDevices, types.HostDevice{Kind: d.Kind, Detail: d.Detail})
	}
	return out
}

func wireInstances(ins []*controller.Instance) []*types.Instance {
	out := make([]*types.Instance, len(ins))
	for i, in := range ins {
		out[i] = wireInstance(in)
	}
	return out
}

func wireGuestDevice(d metadata.Device) types.GuestDevice { return types.GuestDevice(d) }

func wireSpec(in *model.Instance) *types.InstanceSpec {
	if in == nil {
		return nil
	}
	out := &types.InstanceSpec{
		Name: in.Name, UUID: in.UUID, Hostname: in.Hostname, ProjectID: in.ProjectID, AvailabilityZone: in.AvailabilityZone,
		LaunchIndex: in.LaunchIndex, Flavor: in.Flavor, Image: in.Image, VCPUs: in.VCPUs, MemoryMiB: in.MemoryMiB,
		Addresses: in.Addresses, Meta: in.Meta, UserData: in.UserData, VendorData: in.VendorData,
		DedicatedCPUs: in.DedicatedCPUs, ConfigDrive: in.ConfigDrive,
	}
	out.PublicKeys = convertAll(in.PublicKeys, func(k model.PublicKey) types.PublicKey { return types.PublicKey(k) })
	out.Files = convertAll(in.Files, func(f model.File) types.File { return types.File(f) })
	out.Disks = convertAll(in.Disks, func(d model.Disk) types.Disk {
		// (Unencrypted is the parse's note of an explicit "encrypted:
		// false", never shown.)
		return types.Disk{
			Name: d.Name, Bus: d.Bus, Kind: d.Kind, Address: d.Address, Serial: d.Serial, Tag: d.Tag, Size: d.Size,
			Encrypted: d.Encrypted, EncryptionFormat: d.EncryptionFormat,
		}
	})
	out.NICs = convertAll(in.NICs, func(n model.NIC) types.NIC {
		return types.NIC{
			MAC: n.MAC, Bus: n.Bus, Address: n.Address, Tag: n.Tag, Network: n.Network, VLAN: n.VLAN,
			VFTrusted: n.VFTrusted, MTU: n.MTU,
			IPs: convertAll(n.IPs, func(ip model.IPConfig) types.IPConfig { return types.IPConfig(ip) }),
		}
	})
	out.Shares = convertAll(in.Shares, func(s model.Share) types.InstanceShare { return types.InstanceShare(s) })
	out.PCIDevices = convertAll(in.PCIDevices, func(d model.PCIDevice) types.PCIDevice { return types.PCIDevice(d) })
	out.PCIAliases = convertAll(in.PCIAliases, func(a model.PCIAlias) types.PCIAlias { return types.PCIAlias(a) })
	return out
}

// convertAll converts each element; nil stays nil (an omitted field).
func convertAll[S, T any](in []S, f func(S) T) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for i, s := range in {
		out[i] = f(s)
	}
	return out
}

func wireBlockDevice(bd encryption.BlockDevice) types.BlockDevice {
	out := types.BlockDevice{
		Disk: bd.Disk, Encrypted: bd.Encrypted, EncryptionSecretUUID: bd.EncryptionSecretUUID,
		BackingEncryptionSecretUUID: bd.BackingEncryptionSecretUUID, EncryptionFormat: bd.EncryptionFormat,
		EncryptionOptions: bd.EncryptionOptions, Created: bd.Created, KeyGeneration: bd.KeyGeneration, KeySlot: bd.KeySlot,
	}
	if kr := bd.KeyRotation; kr != nil {
		out.KeyRotation = &types.DiskKeyRotation{Generation: kr.Generation, Slot: kr.Slot}
	}
	return out
}

func wireFlavor(f flavorreg.Flavor) types.Flavor       { return types.Flavor(f) }
func domainFlavor(f types.Flavor) flavorreg.Flavor     { return flavorreg.Flavor(f) }
func wireFlavors(fs []flavorreg.Flavor) []types.Flavor { return convertAll(fs, wireFlavor) }

func wireImage(img imagecat.Image) types.Image     { return types.Image(img) }
func wireImages(is []imagecat.Image) []types.Image { return convertAll(is, wireImage) }

func wireDevice(d devinv.Device) types.Device {
	out := types.Device{
		Address: d.Address, Host: d.Host, VendorID: d.VendorID, ProductID: d.ProductID, Class: d.Class, Alias: d.Alias,
		Total: d.Total, Reserved: d.Reserved, Used: d.Used, Traits: d.Traits,
		OneTimeUse: d.OneTimeUse, LiveMigratable: d.LiveMigratable, Present: d.Present,
		Consumer: d.Consumer, ConsumerName: d.ConsumerName, NeedsCleaning: d.NeedsCleaning,
		BurnedAt: d.BurnedAt, ReleasedAt: d.ReleasedAt, CleanedAt: d.CleanedAt, Generation: d.Generation,
	}
	if h := d.LastCleanupHook; h != nil {
		r := types.HookResult(*h)
		out.LastCleanupHook = &r
	}
	return out
}

func wireHostStatus(s hostreg.Status) types.HostStatus {
	return types.HostStatus{Host: s.Host, Version: s.Version, Started: s.Started, LastSeen: s.LastSeen,
		Instances: s.Instances, AgeSeconds: s.Age.Seconds(), Down: s.Down, Stopped: s.Stopped, Traits: s.Traits}
}

func wireKeyPolicy(p keyrotation.Policy) types.KeyPolicy {
	return types.KeyPolicy{KeyRotationPolicy: string(p.KeyRotationPolicy), KeyGeneration: p.KeyGeneration, KeepPriorKeyCount: p.KeepPriorKeyCount}
}

func domainKeyPolicy(p types.KeyPolicy) keyrotation.Policy {
	return keyrotation.Policy{KeyRotationPolicy: keyrotation.PolicyName(p.KeyRotationPolicy), KeyGeneration: p.KeyGeneration, KeepPriorKeyCount: p.KeepPriorKeyCount}
}

func wireKeyStatus(s keyrotation.Status) types.KeyStatus {
	out := types.KeyStatus{
		KeyGeneration: s.KeyGeneration, KeyVersion: s.KeyVersion, KeyCephVersion: s.KeyCephVersion, PriorKeyCount: s.PriorKeyCount, Pending: s.Pending,
		Target: s.Target, Error: s.Error, Updated: s.Updated,
	}
	if p := s.Progress; p != nil {
		out.Progress = &types.KeyProgress{Done: p.Done, Total: p.Total}
	}
	return out
}

func wireKeyReport(r keyrotation.Report) types.KeyReport {
	out := types.KeyReport{
		Class: string(r.Class), InstanceUUID: r.InstanceUUID, InstanceName: r.InstanceName,
		Policy: wireKeyPolicy(r.Policy), Status: wireKeyStatus(r.Status), Complete: r.Complete, NoKeys: r.NoKeys,
	}
	for _, h := range r.Holders {
		out.Holders = append(out.Holders, types.KeyHolder{InstanceUUID: h.InstanceUUID, ShareID: h.Share, Generation: h.Generation, Client: h.Client})
	}
	return out
}

func wireKeyRotation(r keyrotation.Rotation) types.KeyRotation {
	return types.KeyRotation{KeyPolicy: wireKeyPolicy(r.Policy), Subjects: r.Subjects}
}
