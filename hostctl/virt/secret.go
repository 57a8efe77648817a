package virt

import (
	"context"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/vmeta/vmeta/internal/uuid"
)

// secretUsageVolume is libvirt's VIR_SECRET_USAGE_TYPE_VOLUME.
const secretUsageVolume = 1

// LibvirtSecret is a libvirt secret of usage type volume: what QEMU is
// handed a LUKS passphrase through.
type LibvirtSecret struct {
	UUID string
	// Usage is the secret's <usage type='volume'><volume> id, unique per
	// libvirtd.
	Usage string
}

// SecretXML is the definition of a private, persistent (not ephemeral)
// volume secret: libvirt never hands its value back (private), and keeps
// it across a libvirtd restart while it is defined (not ephemeral).
func SecretXML(s LibvirtSecret) ([]byte, error) {
	if _, err := parseSecretUUID(s.UUID); err != nil {
		return nil, err
	}
	if s.Usage == "" {
		return nil, errors.New("libvirt secret: empty usage id")
	}
	type usage struct {
		Type   string `xml:"type,attr"`
		Volume string `xml:"volume"`
	}
	v := struct {
		XMLName     xml.Name `xml:"secret"`
		Ephemeral   string   `xml:"ephemeral,attr"`
		Private     string   `xml:"private,attr"`
		UUID        string   `xml:"uuid"`
		Description string   `xml:"description"`
		Usage       usage    `xml:"usage"`
	}{Ephemeral: "no", Private: "yes", UUID: s.UUID, Description: "vmeta LUKS passphrase", Usage: usage{Type: "volume", Volume: s.Usage}}
	return xml.MarshalIndent(v, "", "  ")
}

func parseSecretUUID(s string) (libvirt.UUID, error) {
	var u libvirt.UUID
	if !uuid.Valid(s) {
		return u, fmt.Errorf("libvirt secret: %q is not a UUID", s)
	}
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != len(u) {
		return u, fmt.Errorf("libvirt secret: %q is not a UUID", s)
	}
	copy(u[:], b)
	return u, nil
}

func secretWhat(uuid string) string { return "secret " + uuid }

// DefineSecret defines (or redefines) a volume secret and sets its value.
// A secret of another UUID holding the same usage id is refused by
// libvirt.
func (c *Conn) DefineSecret(ctx context.Context, s LibvirtSecret, value []byte) error {
	doc, err := SecretXML(s)
	if err != nil {
		return err
	}
	return c.call(ctx, "define", secretWhat(s.UUID), func(l *libvirt.Libvirt) error {
		sec, err := l.SecretDefineXML(string(doc), 0)
		if err != nil {
			return err
		}
		if err := l.SecretSetValue(sec, value, 0); err != nil {
			// Do not leave a secret without its value behind.
			_ = l.SecretUndefine(sec)
			return fmt.Errorf("set value: %w", err)
		}
		return nil
	})
}

// UndefineSecret removes a secret (value included); a missing one is no
// error.
func (c *Conn) UndefineSecret(ctx context.Context, uuid string) error {
	u, err := parseSecretUUID(uuid)
	if err != nil {
		return err
	}
	return c.call(ctx, "undefine", secretWhat(uuid), func(l *libvirt.Libvirt) error {
		sec, err := l.SecretLookupByUUID(u)
		if isNoSecret(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := l.SecretUndefine(sec); err != nil && !isNoSecret(err) {
			return err
		}
		return nil
	})
}

// Secrets lists the volume secrets whose usage id starts with prefix.
func (c *Conn) Secrets(ctx context.Context, prefix string) ([]LibvirtSecret, error) {
	var out []LibvirtSecret
	err := c.call(ctx, "list", "secrets", func(l *libvirt.Libvirt) error {
		ss, _, err := l.ConnectListAllSecrets(1, 0)
		if err != nil {
			return err
		}
		for _, s := range ss {
			if s.UsageType == secretUsageVolume && strings.HasPrefix(s.UsageID, prefix) {
				out = append(out, LibvirtSecret{UUID: formatUUID(s.UUID), Usage: s.UsageID})
			}
		}
		return nil
	})
	return out, err
}

func isNoSecret(err error) bool {
	var le libvirt.Error
	return errors.As(err, &le) && libvirt.ErrorNumber(le.Code) == libvirt.ErrNoSecret
}
