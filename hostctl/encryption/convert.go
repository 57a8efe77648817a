package encryption

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Source is a disk image to copy: a plain qcow2 (Pass nil) or a LUKS
// qcow2 opened with Pass, its encrypted backing file (if any) with
// BackingPass.
type Source struct {
	Path              string
	Pass, BackingPass []byte
}

// Convert copies src, its backing chain flattened, into a new standalone
// qcow2 at dst: encrypted with LUKS under pass, or plain when pass is nil
// (an instance snapshot). The passphrases reach qemu-img through pipes
// (fds 3, 4, 5), never its command line. A failure may leave a partial
// file at dst: the caller removes it.
func (t *Tool) Convert(ctx context.Context, dst string, src Source, pass []byte) error {
	args := []string{"convert", "-q", "-O", "qcow2"}
	var secrets [][]byte
	obj := func(p []byte) string {
		secrets = append(secrets, p)
		id := "sec" + strconv.Itoa(len(secrets)-1)
		args = append(args, "--object", "secret,id="+id+",file=/dev/fd/"+strconv.Itoa(2+len(secrets)))
		return id
	}
	var in []string
	if src.Pass == nil {
		in = []string{"-f", "qcow2", src.Path}
	} else {
		opts := "driver=qcow2,file.filename=" + optEscape(src.Path) + ",encrypt.key-secret=" + obj(src.Pass)
		if src.BackingPass != nil {
			opts += ",backing.encrypt.key-secret=" + obj(src.BackingPass)
		}
		in = []string{"--image-opts", opts}
	}
	if pass != nil {
		o := "encrypt.format=luks,encrypt.key-secret=" + obj(pass)
		if t.iterTime > 0 {
			o += ",encrypt.iter-time=" + strconv.FormatInt(t.iterTime.Milliseconds(), 10)
		}
		args = append(args, "-o", o)
	}
	args = append(append(args, in...), dst)
	var err error
	for range createAttempts {
		if err = runWithSecrets(ctx, t.qemuImg, args, secrets...); err == nil || !strings.Contains(err.Error(), "Unable to get accurate CPU usage") {
			break
		}
		if rerr := os.Remove(dst); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("%w (and removing the partial file: %w)", err, rerr)
		}
	}
	if err != nil && strings.Contains(err.Error(), "Invalid password") {
		return fmt.Errorf("convert %s: %w", src.Path, ErrWrongPassphrase)
	}
	return err
}

// CipherSpec is the LUKS header's cipher in cryptsetup's spelling, as
// Glance's os_encrypt_cipher has it (aes-256 xts plain64 →
// "aes-xts-plain64").
func (i Info) CipherSpec() string {
	if !i.Encrypted || i.Cipher == "" {
		return ""
	}
	alg, _, _ := strings.Cut(i.Cipher, "-")
	s := alg + "-" + i.Mode + "-" + i.IVGen
	if i.IVGenHash != "" {
		s += ":" + i.IVGenHash
	}
	return s
}
