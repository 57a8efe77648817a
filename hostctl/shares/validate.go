package shares

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/shares/hostdir"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/uuid"
)

var (
	hostnameRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)
	nameRE     = regexp.MustCompile(`^[\x21-\x7e]([\x20-\x7e]{0,253}[\x21-\x7e])?$`)
	projectRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,255}$`)
)

// field returns a one-field request error (400).
func field(name string, value any, format string, args ...any) error {
	return invalid(&model.SpecError{Errors: []model.FieldError{{Field: name, Value: value, Rule: fmt.Sprintf(format, args...)}}})
}

// requestError is an invalid share request: a *model.SpecError (the API
// lists its fields, 400) that calls itself a share, not an instance spec.
type requestError struct{ se *model.SpecError }

func invalid(se *model.SpecError) error {
	if se.Of == "" {
		se.Of = "share"
	}
	return &requestError{se}
}

func (e *requestError) Error() string { return e.se.Error() }

func (e *requestError) Unwrap() error { return e.se }

// CheckUUID checks that v, the value of field name, is a UUID, and
// returns it lower-cased.
func CheckUUID(name, v string) (string, error) {
	c, ok := uuid.Canonical(v)
	if !ok {
		return "", field(name, v, "must be a UUID (8-4-4-4-12 hexadecimal digits)")
	}
	return c, nil
}

// CheckTag checks the tag of an attach request (share.tag) against the
// one share tag rule, model.ValidateShareTag: the instance spec, the API
// and the CLI all refuse the same tags with the same reason.
func CheckTag(tag string) error {
	if err := model.ValidateShareTag(tag); err != nil {
		return field("share.tag", tag, "%v", err)
	}
	return nil
}

// ParseNFSExport checks an NFS export: host:/path, with host a DNS name,
// an IPv4 address or a bracketed IPv6 address, and an absolute path
// without whitespace, commas or control characters (it goes to mount(8)
// as one argument; a comma would read as a mount option). It returns the
// export in canonical form.
func ParseNFSExport(export string) (string, error) {
	bad := func(rule string, args ...any) (string, error) {
		return "", field("export_location", export, "is not an NFS export host:/path or [IPv6]:/path: "+rule, args...)
	}
	var host, path string
	if strings.HasPrefix(export, "[") {
		end := strings.Index(export, "]")
		if end < 0 {
			return bad("the IPv6 address has no closing ']'")
		}
		a, err := netip.ParseAddr(export[1:end])
		if err != nil || !a.Is6() || a.Is4In6() {
			return bad("%q is not an IPv6 address", export[1:end])
		}
		rest, ok := strings.CutPrefix(export[end+1:], ":")
		if !ok {
			return bad("no ':' after the address")
		}
		host, path = "["+a.String()+"]", rest
	} else {
		if i := strings.Index(export, ":/"); i > 0 && strings.Contains(export[:i], ":") {
			return bad("an IPv6 address must be in brackets")
		}
		h, p, ok := strings.Cut(export, ":")
		if !ok {
			return bad("no ':' between host and path")
		}
		if a, err := netip.ParseAddr(h); err == nil {
			if !a.Is4() {
				return bad("an IPv6 address must be in brackets")
			}
		} else if !hostnameRE.MatchString(h) || len(h) > 253 {
			return bad("%q is not a host name or IPv4 address", h)
		}
		host, path = strings.ToLower(h), p
	}
	switch {
	case !strings.HasPrefix(path, "/"):
		return bad("the path must be absolute")
	case strings.ContainsAny(path, ", \t\n\r"):
		return bad("the path must not contain whitespace or ','")
	case !isPrintableASCII(path):
		return bad("the path must be printable ASCII")
	}
	return host + ":" + filepath.Clean(path), nil
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkLocalExport checks a local export: a directory inside the share
// root (symbolic links resolved: one that leads out is refused), not the
// root itself, not the directory hostctl mounts NFS exports in. It
// returns the resolved directory.
func checkLocalExport(root hostdir.Root, mountDir, export string) (string, error) {
	dirs, err := root.Dirs([]model.Share{{ShareID: "x", Source: export}})
	if err != nil {
		var se *model.SpecError
		if errors.As(err, &se) {
			for i := range se.Errors {
				se.Errors[i].Field = "export_location"
			}
			return "", invalid(se)
		}
		return "", err
	}
	dir := dirs["x"]
	if m, err := filepath.EvalSymlinks(mountDir); err == nil && (dir == m || strings.HasPrefix(dir, m+string(filepath.Separator))) {
		return "", field("export_location", export, "is inside %s, where hostctl mounts NFS shares", mountDir)
	}
	return dir, nil
}

// checkCreate checks a create request and returns the share it makes
// (ID lower-cased, export canonical).
func (s *Service) checkCreate(req types.ShareCreateRequest) (Share, error) {
	var errs []model.FieldError
	add := func(err error) {
		var se *model.SpecError
		if errors.As(err, &se) {
			errs = append(errs, se.Errors...)
		}
	}
	sh := Share{Name: req.Name, Project: req.ProjectID, Proto: req.Proto}
	if req.ID != "" {
		id, err := CheckUUID("id", req.ID)
		add(err)
		sh.ID = id
	}
	if req.Name != "" && !nameRE.MatchString(req.Name) {
		add(field("name", req.Name, "must be 1 to 255 printable ASCII characters, not starting or ending with a space"))
	}
	if !projectRE.MatchString(req.ProjectID) {
		add(field("project_id", req.ProjectID, "is required: 1 to 255 of A-Z a-z 0-9 . _ -"))
	}
	switch req.Proto {
	case types.ShareProtoLocal:
		dir, err := checkLocalExport(s.root, s.mounts.base, req.ExportLocation)
		add(err)
		sh.Export = dir
	case types.ShareProtoNFS:
		exp, err := ParseNFSExport(req.ExportLocation)
		add(err)
		sh.Export = exp
	case ProtoCephFS:
		exp, err := ParseCephFSExport(req.ExportLocation)
		add(err)
		sh.Export = exp.String()
	default:
		add(field("share_proto", req.Proto, "must be %s, %s or %s", types.ShareProtoLocal, types.ShareProtoNFS, ProtoCephFS))
	}
	if len(errs) > 0 {
		return Share{}, invalid(&model.SpecError{Errors: errs})
	}
	return sh, nil
}
