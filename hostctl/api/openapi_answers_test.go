package api

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	devinv "github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/events"
	flavorreg "github.com/vmeta/vmeta/hostctl/flavors"
	hostreg "github.com/vmeta/vmeta/hostctl/hosts"
	imagecat "github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

// answers is every service of the API at once, answering every call
// with a value of its type that has every field set (filled) or none
// but those a real answer always has: each answer body the API can
// make, at its fullest and at its emptiest.
type answers struct {
	t      *testing.T
	filled bool
}

// value is a T with every field set (filled), or the zero T.
func value[T any](a answers) T {
	if a.filled {
		return testenv.Filled[T](a.t)
	}
	var zero T
	return zero
}

func (a answers) instance() *controller.Instance {
	in := value[controller.Instance](a)
	if in.Spec == nil {
		in.Spec = &model.Instance{Name: "x"} // a stored instance has its spec
	}
	return &in
}

func (a answers) ApplyInstance(context.Context, *model.Instance) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) Get(context.Context, string) (*controller.Instance, error) { return a.instance(), nil }
func (a answers) List(context.Context) ([]*controller.Instance, error) {
	return []*controller.Instance{a.instance()}, nil
}
func (a answers) ListAll(ctx context.Context) ([]*controller.Instance, error) { return a.List(ctx) }
func (a answers) Delete(context.Context, string) error                        { return nil }
func (a answers) Start(context.Context, string) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) Stop(context.Context, string, time.Duration) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) Reboot(context.Context, string, bool) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) AttachDisk(context.Context, string, types.DiskRequest) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) DetachDisk(context.Context, string, types.DetachRequest) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) AttachNIC(context.Context, string, types.NICRequest) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) DetachNIC(context.Context, string, types.DetachRequest) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) WriteConfigDrive(_ context.Context, _ string, _ configdrive.Format, w io.Writer) (int64, error) {
	n, err := w.Write([]byte("CD001"))
	return int64(n), err
}
func (a answers) Resize(context.Context, string, string) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) Rebuild(context.Context, string, string) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) Snapshot(context.Context, string, types.SnapshotRequest) (imagecat.Image, error) {
	return value[imagecat.Image](a), nil
}
func (a answers) SnapshotAnyProject(ctx context.Context, name string, req types.SnapshotRequest) (imagecat.Image, error) {
	return a.Snapshot(ctx, name, req)
}
func (a answers) Shelve(context.Context, string) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) Unshelve(context.Context, string) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) Rescue(context.Context, string, types.RescueRequest) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) Unrescue(context.Context, string) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) Migrate(context.Context, string, types.MigrateRequest) (types.Migration, error) {
	return value[types.Migration](a), nil
}
func (a answers) ConfirmMigration(context.Context, string) (types.Migration, error) {
	return value[types.Migration](a), nil
}
func (a answers) RevertMigration(context.Context, string) (types.Migration, error) {
	return value[types.Migration](a), nil
}
func (a answers) Migration(context.Context, string) (types.Migration, error) {
	return value[types.Migration](a), nil
}
func (a answers) Evacuate(context.Context, string, string) (types.Evacuation, error) {
	return value[types.Evacuation](a), nil
}
func (a answers) Adopt(context.Context, string) (*controller.Instance, error) {
	return a.instance(), nil
}
func (a answers) ForceDeleteFromStore(context.Context, string) ([]string, error) {
	return value[[]string](a), nil
}
func (a answers) Read(context.Context, string, string, int, time.Duration) ([]events.Event, error) {
	e := value[events.Event](a)
	if a.filled {
		e.Payload = []byte(`{"share_id":"s"}`)
	}
	return []events.Event{e}, nil
}
func (a answers) CreateFlavor(context.Context, flavorreg.Flavor) (flavorreg.Flavor, error) {
	return value[flavorreg.Flavor](a), nil
}
func (a answers) Flavor(context.Context, string) (flavorreg.Flavor, error) {
	return value[flavorreg.Flavor](a), nil
}
func (a answers) Flavors(context.Context) ([]flavorreg.Flavor, error) {
	return value[[]flavorreg.Flavor](a), nil
}
func (a answers) DeleteFlavor(context.Context, string) error { return nil }
func (a answers) ImportImage(_ context.Context, _ string, _ map[string]string, r io.Reader) (imagecat.Image, error) {
	_, err := io.Copy(io.Discard, r)
	return value[imagecat.Image](a), err
}
func (a answers) Image(context.Context, string) (imagecat.Image, error) {
	return value[imagecat.Image](a), nil
}
func (a answers) Images(context.Context) ([]imagecat.Image, error) {
	return value[[]imagecat.Image](a), nil
}
func (a answers) DeleteImage(context.Context, string) error { return nil }
func (a answers) CreateSecret(context.Context, types.SecretRequest) (*types.Secret, error) {
	s := value[types.Secret](a)
	return &s, nil
}
func (a answers) Secrets(context.Context, string) ([]types.Secret, error) {
	return value[[]types.Secret](a), nil
}
func (a answers) Secret(context.Context, string) (*types.Secret, error) {
	s := value[types.Secret](a)
	return &s, nil
}
func (a answers) DeleteSecret(context.Context, string) error { return nil }

func (a answers) policy() keyrotation.Policy {
	p := value[keyrotation.Policy](a)
	if a.filled {
		p.KeyRotationPolicy = keyrotation.PolicyName(types.KeyPolicyKeyGeneration)
	}
	return p
}
func (a answers) Reports(context.Context, keyrotation.Class) ([]keyrotation.Report, error) {
	r := value[keyrotation.Report](a)
	r.Policy = a.policy()
	return []keyrotation.Report{r}, nil
}
func (a answers) SetPolicy(context.Context, keyrotation.Subject, keyrotation.Policy) (keyrotation.Policy, error) {
	return a.policy(), nil
}
func (a answers) Rotate(context.Context, keyrotation.Subject) (keyrotation.Rotation, error) {
	r := value[keyrotation.Rotation](a)
	r.Policy = a.policy()
	return r, nil
}
func (a answers) Prune(context.Context, keyrotation.Class, int) (keyrotation.Status, error) {
	return value[keyrotation.Status](a), nil
}
func (a answers) InstanceSubject(_ context.Context, c keyrotation.Class, name string) (keyrotation.Subject, error) {
	return keyrotation.Subject{Class: c, InstanceName: name}, nil
}
func (a answers) RevealProxySecret(context.Context) ([]byte, error) { return []byte("secret"), nil }

func (a answers) share() types.Share {
	s := value[types.Share](a)
	s.Proto = types.ShareProtoNFS
	return s
}
func (a answers) mapping() types.ShareMapping {
	m := value[types.ShareMapping](a)
	m.Status = types.ShareActive
	return m
}
func (a answers) CreateShare(context.Context, types.Principal, types.ShareCreateRequest) (types.Share, error) {
	return a.share(), nil
}
func (a answers) CephAuth(context.Context, types.Principal, types.CephAuthRequest) (types.CephAuthResult, error) {
	return value[types.CephAuthResult](a), nil
}
func (a answers) ListShares(context.Context, types.Principal) ([]types.Share, error) {
	if !a.filled {
		return nil, nil
	}
	return []types.Share{a.share()}, nil
}
func (a answers) GetShare(context.Context, types.Principal, string) (types.Share, error) {
	return a.share(), nil
}
func (a answers) DeleteShare(context.Context, types.Principal, string) error { return nil }
func (a answers) ServerShares(context.Context, types.Principal, string) ([]types.ShareMapping, error) {
	if !a.filled {
		return nil, nil
	}
	return []types.ShareMapping{a.mapping()}, nil
}
func (a answers) ServerShare(context.Context, types.Principal, string, string) (types.ShareMapping, error) {
	return a.mapping(), nil
}
func (a answers) AttachShare(context.Context, types.Principal, string, types.ServerShareAttach) (types.ShareMapping, error) {
	return a.mapping(), nil
}
func (a answers) DetachShare(context.Context, types.Principal, string, string, bool) (types.ShareMapping, error) {
	return a.mapping(), nil
}

func (a answers) device() devinv.Device {
	d := value[devinv.Device](a)
	if d.LastCleanupHook != nil {
		d.LastCleanupHook.Outcome = "ok"
	}
	return d
}
func (a answers) ListDevices(context.Context, bool, string, bool) ([]devinv.Device, error) {
	return []devinv.Device{a.device()}, nil
}
func (a answers) Show(context.Context, string) (devinv.Device, error)  { return a.device(), nil }
func (a answers) Clean(context.Context, string) (devinv.Device, error) { return a.device(), nil }

// hostAnswers is the hosts service (its List is not the instances').
type hostAnswers struct{ answers }

func (h hostAnswers) List(context.Context) ([]hostreg.Status, error) {
	return []hostreg.Status{value[hostreg.Status](h.answers)}, nil
}

// TestOpenAPIAnswers: every operation of openapi.yaml, sent a valid
// request, answers with a status and a body the document describes,
// both when every field of the answer is set and when none is but those
// a real answer always has (nil slices are null, empty strings omitted):
// the answers the package's other tests do not provoke are checked too.
func TestOpenAPIAnswers(t *testing.T) {
	multipartBody := func() (string, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		part, _ := mw.CreatePart(map[string][]string{"Content-Disposition": {`form-data; name="image"`}, "Content-Type": {"application/json"}})
		_, _ = part.Write([]byte(`{"name": "img", "properties": {"os_distro": "debian"}}`))
		file, _ := mw.CreateFormFile("file", "img")
		_, _ = file.Write([]byte("QFI\xfb"))
		_ = mw.Close()
		return mw.FormDataContentType(), b.String()
	}
	mpType, mpBody := multipartBody()
	requests := []struct{ method, path, contentType, body string }{
		{"GET", "/v1/instances", "", ""},
		{"GET", "/v1/instances?all_hosts=1", "", ""},
		{"POST", "/v1/instances", "application/yaml", "name: x\naddresses: [10.0.0.1]\n"},
		{"GET", "/v1/instances/x", "", ""},
		{"DELETE", "/v1/instances/x", "", ""},
		{"DELETE", "/v1/instances/x?force_from_store=1", "", ""},
		{"POST", "/v1/instances/x/adopt", "", ""},
		{"GET", "/v1/instances/x/configdrive?format=vfat", "", ""},
		{"POST", "/v1/instances/x/start", "", ""},
		{"POST", "/v1/instances/x/stop", "application/json", `{"timeout_seconds": 1.5}`},
		{"POST", "/v1/instances/x/reboot", "application/json", `{"type": "soft"}`},
		{"POST", "/v1/instances/x/disks", "application/json", `{"tag": "d", "size": "1G", "bus": "scsi", "encrypted": true, "live": true}`},
		{"DELETE", "/v1/instances/x/disks?tag=d&live=true&config=0", "", ""},
		{"POST", "/v1/instances/x/nics", "application/json", `{"tag": "n", "network": "default"}`},
		{"DELETE", "/v1/instances/x/nics?mac=52:54:00:00:00:01", "", ""},
		{"POST", "/v1/instances/x/resize", "application/json", `{"flavor": "f"}`},
		{"POST", "/v1/instances/x/rebuild", "application/json", `{"image": "i"}`},
		{"POST", "/v1/instances/x/snapshot", "application/json", `{"name": "snap", "encryption_key": "new"}`},
		{"POST", "/v1/instances/x/shelve", "", ""},
		{"POST", "/v1/instances/x/unshelve", "", ""},
		{"POST", "/v1/instances/x/rescue", "application/json", `{"image": "i", "timeout_seconds": 3}`},
		{"POST", "/v1/instances/x/unrescue", "", ""},
		{"POST", "/v1/instances/x/migrate", "application/json", `{"host": "b", "timeout_seconds": 3}`},
		{"POST", "/v1/instances/x/confirm-migration", "", ""},
		{"POST", "/v1/instances/x/revert-migration", "", ""},
		{"GET", "/v1/instances/x/migration", "", ""},
		{"POST", "/v1/instances/x/evacuate", "application/json", `{"host": "b"}`},
		{"GET", "/v1/flavors", "", ""},
		{"POST", "/v1/flavors", "application/json", `{"name": "f", "vcpus": 1, "ram": 64, "disk": 1, "ephemeral": 0, "swap": 0, "extra_specs": {"hw:ephemeral_encryption": "true"}}`},
		{"GET", "/v1/flavors/f", "", ""},
		{"DELETE", "/v1/flavors/f", "", ""},
		{"GET", "/v1/images", "", ""},
		{"POST", "/v1/images", mpType, mpBody},
		{"GET", "/v1/images/i", "", ""},
		{"DELETE", "/v1/images/i", "", ""},
		{"GET", "/v1/secrets?project=p", "", ""},
		{"POST", "/v1/secrets", "application/json", `{"name": "s", "project_id": "p", "payload": "c2VjcmV0"}`},
		{"GET", "/v1/secrets/u", "", ""},
		{"DELETE", "/v1/secrets/u", "", ""},
		{"GET", "/v1/keys?class=kek", "", ""},
		{"PUT", "/v1/keys/disk/policy?instance=x", "application/json", `{"keyRotationPolicy": "KeyGeneration", "keyGeneration": 2, "keepPriorKeyCount": 1}`},
		{"POST", "/v1/keys/token/rotate", "", ""},
		{"POST", "/v1/keys/proxy/prune", "application/json", `{"keep": 1}`},
		{"GET", "/v1/keys/proxy-secret/reveal", "", ""},
		{"GET", "/v1/shares", "", ""},
		{"POST", "/v1/shares", "application/json", `{"project_id": "p", "share_proto": "nfs", "export_location": "h:/x"}`},
		{"POST", "/v1/shares/ceph-auth", "application/json", `{"admin_keyring": "[client.admin]\\n\\tkey = AQ==\\n", "mons": "127.0.0.1:3300"}`},
		{"GET", "/v1/shares/s", "", ""},
		{"DELETE", "/v1/shares/s", "", ""},
		{"GET", "/v1/servers/x/shares", "", ""},
		{"POST", "/v1/servers/x/shares?live=1", "application/json", `{"share": {"share_id": "s", "tag": "t"}}`},
		{"GET", "/v1/servers/x/shares/s", "", ""},
		{"DELETE", "/v1/servers/x/shares/s?live=true", "", ""},
		{"GET", "/v1/devices?needs_cleaning=true&trait=HW_PCI_ONE_TIME_USE&all_hosts=1", "", ""},
		{"GET", "/v1/devices/0000:00:02.0", "", ""},
		{"POST", "/v1/devices/0000:00:02.0/clean", "", ""},
		{"GET", "/v1/hosts", "", ""},
		{"GET", "/v1/events/devices?after=1-0&limit=5&wait=0s", "", ""},
		{"GET", "/v1/whoami", "", ""},
		{"GET", "/v1/health", "", ""},
		{"GET", "/v1/openapi.json", "", ""},
	}
	for _, filled := range []bool{true, false} {
		t.Run(map[bool]string{true: "filled", false: "empty"}[filled], func(t *testing.T) {
			v, err := newOAValidator(OpenAPIYAML)
			if err != nil {
				t.Fatal(err)
			}
			a := answers{t: t, filled: filled}
			s := Services{
				Instances: a, Power: a, Reboot: a, Hotplug: a, ConfigDrives: a, Resize: a, Snapshot: a, Shelve: a,
				Hosts: hostAnswers{a}, Ownership: a, Events: a, Flavors: a, Images: a, Secrets: a, Keys: a, Shares: a, Devices: a, Migrations: a,
				Evacuations: a,
			}
			srv := httptest.NewServer(v.wrap(NewHandler(s, slog.New(slog.DiscardHandler), localAuth{})))
			for _, rq := range requests {
				req, err := http.NewRequest(rq.method, srv.URL+rq.path, strings.NewReader(rq.body))
				if err != nil {
					t.Fatal(err)
				}
				if rq.contentType != "" {
					req.Header.Set("Content-Type", rq.contentType)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode >= 300 {
					t.Errorf("%s %s: %d %s", rq.method, rq.path, resp.StatusCode, body)
				}
			}
			srv.Close() // waits for the handlers, which validate after answering
			for _, s := range v.Violations() {
				t.Error(s)
			}
			var unseen []string
			for _, item := range v.doc.Paths.Map() {
				for _, op := range item.Operations() {
					if v.seen[op.OperationID] == 0 {
						unseen = append(unseen, op.OperationID)
					}
				}
			}
			slices.Sort(unseen)
			if len(unseen) > 0 {
				t.Errorf("operations not requested: %v", unseen)
			}
		})
	}
}
