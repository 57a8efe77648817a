package virt

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
)

// extraDevices are the device elements Host.Extra may name: those a part
// contributes today (a new part adds its element here when it needs
// one that libvirt orders among the others).
var extraDevices = map[string]bool{"watchdog": true}

// parseExtraDevice decodes one contributed device element: exactly one
// element, of a kind in extraDevices.
func parseExtraDevice(raw []byte) (extraDeviceXML, error) {
	var e extraDeviceXML
	dec := xml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("%q: %w", raw, err)
	}
	if !extraDevices[e.XMLName.Local] || e.XMLName.Space != "" {
		return e, fmt.Errorf("%q: <%s> is not a device a part may contribute", raw, e.XMLName.Local)
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return e, nil
		}
		if err != nil {
			return e, fmt.Errorf("%q: %w", raw, err)
		}
		if cd, ok := tok.(xml.CharData); !ok || len(bytes.TrimSpace(cd)) > 0 {
			return e, fmt.Errorf("%q: more than one element", raw)
		}
	}
}
