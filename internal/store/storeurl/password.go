package storeurl

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vmeta/vmeta/internal/store/redis"
)

// PasswordEnv is the environment variable that may hold the store's
// password, for programs started with one (a systemd EnvironmentFile
// readable by root only): unlike a command line, a process's environment
// is visible only to its owner and root.
const PasswordEnv = "VMETA_STORE_PASSWORD"

// maxPasswordFile bounds the password file read.
const maxPasswordFile = 4096

// Password returns the store password from file (--store-password-file;
// its content up to the first line end) when file is set, otherwise from
// the environment variable PasswordEnv (getenv, os.Getenv when nil); ""
// when neither has one. An empty or unreadable file is an error naming
// it, never showing its content.
func Password(file string, getenv func(string) string) (string, error) {
	if file == "" {
		if getenv == nil {
			getenv = os.Getenv
		}
		return getenv(PasswordEnv), nil
	}
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("--store-password-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPasswordFile+1))
	defer clear(b)
	if err != nil {
		return "", fmt.Errorf("--store-password-file: %w", err)
	}
	n := len(b)
	if n > maxPasswordFile {
		return "", fmt.Errorf("--store-password-file %s: longer than %d bytes", file, maxPasswordFile)
	}
	pw, _, _ := strings.Cut(string(b[:n]), "\n")
	pw = strings.TrimRight(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("--store-password-file %s: empty (want the password on the first line)", file)
	}
	return pw, nil
}

// URLHasPassword reports whether a store URL carries a password (user
// information or a password option): given on a command line, every user
// of the machine sees it (ps). Programs warn about it; pass the password
// with --store-password-file or PasswordEnv instead.
func URLHasPassword(rawURL string) bool {
	if IsEmbedded(rawURL) {
		return false
	}
	if k, _, err := parse(rawURL); err != nil || k != kindRedis {
		return false
	}
	return redis.URLHasPassword(rawURL)
}

// PasswordWarning is the log message for a URL that carries a password.
const PasswordWarning = "the store URL carries a password, which every user of this machine can read on the command line (ps): pass it with --store-password-file or " + PasswordEnv + " instead"
