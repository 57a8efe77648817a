package controller

import "github.com/vmeta/vmeta/internal/keys"

// WithFakeKeys is WithKeys on the fake disk layer (fakedisk_test.go):
// the real key manager, the fake LUKS tool and image catalog.
func (e *env) WithFakeKeys() *keys.Manager {
	e.t.Helper()
	withFakeEncryption(e.t, e)
	return realKeys(e.t, e)
}

// FakeLUKSImage is a fake LUKS image (fakedisk_test.go) of 32 MiB under
// pass, to import into the catalog of an env on the fake disk layer.
func FakeLUKSImage(pass []byte) []byte {
	return fakeDisk{size: 32 << 20, pass: passDigest(pass), data: patternData}.encode()
}
