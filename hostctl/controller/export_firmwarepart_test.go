package controller

import "github.com/vmeta/vmeta/hostctl/parts/firmware"

// The firmware transport is a part (hostctl/parts/firmware) the daemon
// registers with a hypervisor; the harness's tests turn it on and off
// with withFirmware.

// firmwareFileRE matches the instance directory's firmware entry files.
var firmwareFileRE = firmware.FileRE

// withFirmware registers the firmware part over e's hypervisor, on or off
// (--firmware-metadata), in place of one registered before.
func withFirmware(e *env, on bool) {
	p := firmware.New(e.c.domains, e.c.dataDir, on, nil)
	for i, q := range e.c.parts {
		if _, ok := q.(*firmware.Part); ok {
			e.c.parts[i] = p
			return
		}
	}
	e.c.parts = append(e.c.parts, p)
}
