package main

import (
	"fmt"
	"net/netip"
)

// The benchmark's instance: what a real guest has (two tagged disks, two
// NICs, user data, a public key), reached from source address 127.0.0.1,
// where wrk connects from.
const (
	benchName     = "bench-web"
	benchUUID     = "6a0f7d3c-2b1e-4c5d-9e8f-7a6b5c4d3e2f"
	benchHostname = "bench-web"
	benchAddress  = "127.0.0.1"
)

// specYAML renders an instance spec. The memory phase renders thousands,
// each with its own name, UUID, source address, MACs and NIC address.
func specYAML(name, uuid, hostname, addr string, n int) []byte {
	hi, lo := byte(n>>8), byte(n)
	return fmt.Appendf(nil, `name: %[1]s
uuid: %[2]s
hostname: %[3]s
project_id: bench
availability_zone: nova
flavor: m1.small
image: debian-12
addresses: [%[4]s]
meta:
  role: webserver
  tier: frontend
public_keys:
  - name: bench
    data: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGj8cJb0mJm3nWq0ZkKqJbq6Gf0x2Z1Zs8c6s6j8c9Xx bench@vmeta
user_data: |
  #cloud-config
  package_update: true
  packages: [nginx]
  runcmd:
    - systemctl enable --now nginx
disks:
  - name: vda
    bus: virtio
    address: "0000:00:04.0"
    serial: root-%02[5]x%02[6]x
    tag: root
  - name: vdb
    bus: virtio
    address: "0000:00:05.0"
    serial: data-%02[5]x%02[6]x
    tag: data
    size: 20G
nics:
  - mac: "52:54:00:01:%02[5]x:%02[6]x"
    address: "0000:00:02.0"
    tag: public
    ips:
      - address: 10.1.%[5]d.%[6]d/8
        gateway: 10.0.0.1
        dns: [10.0.0.1]
  - mac: "52:54:00:02:%02[5]x:%02[6]x"
    address: "0000:00:03.0"
    tag: storage
    vlan: 100
`, name, uuid, hostname, addr, hi, lo)
}

// benchSpec is the spec of the benchmark's instance.
func benchSpec() []byte {
	return specYAML(benchName, benchUUID, benchHostname, benchAddress, 0)
}

// maxInstances is how many distinct source addresses memInstance has.
const maxInstances = 254 * 256

// memInstance is the i-th instance of the memory phase (i < maxInstances):
// name, UUID, source address 127.1.x.y and spec.
func memInstance(i int) (name, uuid string, addr netip.Addr, spec []byte) {
	addr = netip.AddrFrom4([4]byte{127, 1, byte(i / 254), byte(i%254 + 1)})
	name = fmt.Sprintf("mem-%05d", i)
	uuid = fmt.Sprintf("00000000-0000-4000-8000-%012x", i+1)
	return name, uuid, addr, specYAML(name, uuid, name, addr.String(), i+1)
}
