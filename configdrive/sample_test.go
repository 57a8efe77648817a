package configdrive

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/vmeta/vmeta/internal/metadata"
)

// SampleFiles returns a realistic config-drive tree (sorted, as
// Tree.ConfigDriveFiles returns it): every OpenStack version plus latest with
// the files Nova writes for it, one content blob, and the two EC2 versions
// Nova keeps. Deterministic. test/bench/isocompare has a small copy.
func SampleFiles() []metadata.File {
	rng := rand.New(rand.NewPCG(1, 2))
	seed := make([]byte, 512) // Nova: os.urandom(512)
	for i := range seed {
		seed[i] = byte(rng.UintN(256))
	}
	const uuid = "d4f6b1a2-3c5e-4f70-8a9b-0c1d2e3f4a5b"
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq3yX6vQf1tqkJ8mR9P0wZ1bF2cD3eE4fG5hH6iJ7kL alice@example"
	userData := "#cloud-config\nhostname: web-1\npackages: [nginx]\nruncmd:\n  - [systemctl, enable, --now, nginx]\n" +
		strings.Repeat("# padding line to make user data realistic\n", 30)
	network := `{"links":[{"id":"tap0","type":"ovs","mtu":1450,"ethernet_mac_address":"fa:16:3e:12:34:56","vif_id":"0c1d2e3f"}],` +
		`"networks":[{"id":"network0","type":"ipv4_dhcp","link":"tap0","network_id":"9a8b7c6d"}],` +
		`"services":[{"type":"dns","address":"192.0.2.53"}]}`
	metaData := func(v string) string {
		var b strings.Builder
		fmt.Fprintf(&b, `{"uuid":%q,"public_keys":{"alice":%q},"keys":[{"name":"alice","type":"ssh","data":%q}],`, uuid, key, key)
		b.WriteString(`"hostname":"web-1.novalocal","name":"web-1","launch_index":0,"availability_zone":"nova",`)
		b.WriteString(`"meta":{"role":"web"},"files":[{"path":"/etc/motd","content_path":"/content/0000"}]`)
		if v >= metadata.Grizzly || v == "latest" {
			fmt.Fprintf(&b, `,"random_seed":%q`, base64.StdEncoding.EncodeToString(seed))
		}
		if v >= metadata.Liberty || v == "latest" {
			b.WriteString(`,"project_id":"6f70656e737461636b20697320636f6f6c"`)
		}
		if v >= metadata.NewtonOne || v == "latest" {
			b.WriteString(`,"devices":[{"type":"nic","bus":"pci","address":"0000:00:03.0","mac":"fa:16:3e:12:34:56","tags":["web"]}]`)
		}
		if v >= metadata.Victoria || v == "latest" {
			b.WriteString(`,"dedicated_cpus":[]`)
		}
		b.WriteString("}")
		return b.String()
	}

	t := metadata.Tree{Files: map[string][]byte{}}
	for _, v := range append(append([]string{}, metadata.OpenStackVersions...), "latest") {
		d := "openstack/" + v + "/"
		t.Files[d+"meta_data.json"] = []byte(metaData(v))
		t.Files[d+"user_data"] = []byte(userData)
		if v >= metadata.Havana || v == "latest" {
			t.Files[d+"vendor_data.json"] = []byte("{}")
		}
		if v >= metadata.Liberty || v == "latest" {
			t.Files[d+"network_data.json"] = []byte(network)
		}
		if v >= metadata.NewtonTwo || v == "latest" {
			t.Files[d+"vendor_data2.json"] = []byte(`{"static":{}}`)
		}
	}
	t.Files["openstack/content/0000"] = []byte("Welcome to web-1\n")
	ec2 := fmt.Sprintf(`{"ami-id":"ami-00000001","ami-launch-index":0,"hostname":"web-1.novalocal",`+
		`"instance-id":"i-00000001","instance-type":"m1.small","local-ipv4":"192.0.2.10",`+
		`"placement":{"availability-zone":"nova"},"public-keys":{"0":{"openssh-key":%q}},`+
		`"reservation-id":"r-abcdef01","security-groups":["default"]}`, key)
	for _, v := range []string{metadata.EC2Latest, "latest"} {
		t.Files["ec2/"+v+"/meta-data.json"] = []byte(ec2)
		t.Files["ec2/"+v+"/user-data"] = []byte(userData)
	}
	return t.ConfigDriveFiles()
}
