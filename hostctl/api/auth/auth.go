// Package auth holds who may call hostctl's admin API: bearer tokens
// (only their SHA-256 is kept, in a tokens file), the roles they carry,
// and the unix socket's local administrator. It links neither the
// controller nor libvirt, so `hostctl token new` does not either.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// Local is the principal of the unix socket: whoever can open it (it is
// 0600, owned by the daemon's user) is an administrator.
var Local = types.Principal{Name: "local", Role: types.RoleAdmin}

// Authenticator decides who a request comes from.
type Authenticator interface {
	Authenticate(r *http.Request) (types.Principal, error)
}

// ErrUnauthenticated is answered with 401.
var ErrUnauthenticated = errors.New("missing or invalid bearer token")

// LocalAuth authenticates every request as Local (the unix socket).
type LocalAuth struct{}

// Authenticate implements Authenticator.
func (LocalAuth) Authenticate(*http.Request) (types.Principal, error) { return Local, nil }

// TokenEntry is one API token as the tokens file lists it. Only the token's
// SHA-256 is stored, so the file does not hold usable secrets.
type TokenEntry struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	Project string `json:"project,omitempty"`
	// SHA256 is the hex SHA-256 of the bearer token.
	SHA256 string `json:"sha256"`
}

var (
	sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	projectRE   = regexp.MustCompile(`^[A-Za-z0-9._-]{1,255}$`)
)

// TokenAuth authenticates "Authorization: Bearer <token>" against a list
// of token hashes.
type TokenAuth struct {
	entries []TokenEntry
	hashes  [][]byte
}

// NewTokenAuth checks the entries and returns an authenticator for them.
func NewTokenAuth(entries []TokenEntry) (*TokenAuth, error) {
	a := &TokenAuth{}
	seen := map[string]bool{}
	for i, e := range entries {
		switch {
		case e.Name == "":
			return nil, fmt.Errorf("tokens[%d].name: is required", i)
		case e.Role != types.RoleAdmin && e.Role != types.RoleMember:
			return nil, fmt.Errorf("tokens[%d].role: %q: must be admin or member", i, e.Role)
		case e.Role == types.RoleMember && !projectRE.MatchString(e.Project):
			return nil, fmt.Errorf("tokens[%d].project: %q: a member token needs a project id", i, e.Project)
		case e.Role == types.RoleAdmin && e.Project != "":
			return nil, fmt.Errorf("tokens[%d].project: an admin token is not scoped to a project", i)
		case !sha256HexRE.MatchString(e.SHA256):
			return nil, fmt.Errorf("tokens[%d].sha256: must be 64 lower-case hex digits (the token's SHA-256)", i)
		case seen[e.SHA256]:
			return nil, fmt.Errorf("tokens[%d].sha256: the same token is listed twice", i)
		}
		seen[e.SHA256] = true
		h, _ := hex.DecodeString(e.SHA256)
		a.entries = append(a.entries, e)
		a.hashes = append(a.hashes, h)
	}
	return a, nil
}

// LoadTokens reads a tokens file: a JSON list of TokenEntry.
func LoadTokens(path string) (*TokenAuth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	var entries []TokenEntry
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	a, err := NewTokenAuth(entries)
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return a, nil
}

// Authenticate implements Authenticator. Every entry is compared, in
// constant time, so timing tells nothing about which hash nearly matched.
func (a *TokenAuth) Authenticate(r *http.Request) (types.Principal, error) {
	h := r.Header.Values("Authorization")
	if len(h) != 1 {
		return types.Principal{}, ErrUnauthenticated
	}
	tok, ok := strings.CutPrefix(h[0], "Bearer ")
	if !ok || tok == "" {
		return types.Principal{}, ErrUnauthenticated
	}
	sum := sha256.Sum256([]byte(tok))
	match := -1
	for i, want := range a.hashes {
		if subtle.ConstantTimeCompare(sum[:], want) == 1 {
			match = i
		}
	}
	if match < 0 {
		return types.Principal{}, ErrUnauthenticated
	}
	e := a.entries[match]
	return types.Principal{Name: e.Name, Role: e.Role, Project: e.Project}, nil
}

// NewToken returns a fresh random bearer token and its tokens-file entry.
func NewToken(name, role, project string) (string, TokenEntry, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", TokenEntry{}, fmt.Errorf("generate token: %w", err)
	}
	tok := "vmeta_" + hex.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(tok))
	e := TokenEntry{Name: name, Role: role, Project: project, SHA256: hex.EncodeToString(sum[:])}
	if _, err := NewTokenAuth([]TokenEntry{e}); err != nil {
		return "", TokenEntry{}, err
	}
	return tok, e, nil
}
