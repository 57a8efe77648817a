package cli_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/internal/testenv"
)

func hostctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Run(context.Background(), args, cli.Env{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader("")})
	return code, out.String(), errOut.String()
}

// outputCase is a command line that succeeds (exit 0, nothing on
// stderr) printing every want.
type outputCase struct {
	args []string
	want []string
}

// checkOutputs runs each case and reports what it lacks.
func checkOutputs(t *testing.T, cases []outputCase) {
	t.Helper()
	for _, tc := range cases {
		code, out, errOut := hostctl(t, tc.args...)
		if code != 0 || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: stdout lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
}

// TestCommandHelp: every command answers --help with its own usage line
// and flags on stdout, exit 0, before checking anything else.
func TestCommandHelp(t *testing.T) {
	checkOutputs(t, []outputCase{
		{[]string{"instance", "apply", "--help"}, []string{"Usage: hostctl instance apply -f SPEC.yaml", "-f string", "instance spec file", "-output", "-socket"}},
		{[]string{"instance", "attach-disk", "-h"}, []string{"Usage: hostctl instance attach-disk NAME", "-bus", "-live", "persistent"}},
		{[]string{"network", "setup-metadata", "--help"}, []string{"-dry-run", "-bridge"}},
		{[]string{"help", "instance", "stop"}, []string{"Usage: hostctl instance stop", "-timeout"}},
		{[]string{"--help", "instance", "show"}, []string{"Usage: hostctl instance show NAME"}},
		{[]string{"instance", "--help"}, []string{"hostctl instance list", "hostctl instance detach-nic"}},
		{[]string{"help"}, []string{"hostctl configdrive build", "hostctl token new", "Client flags"}},
		{[]string{"--help"}, []string{"hostctl instance apply"}},
	})
}

// TestUnknownCommand: a wrong command is a short error with a hint, not
// the whole usage.
func TestUnknownCommand(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		says, pre string
	}{
		{[]string{"frob"}, `unknown command "frob"`, "hostctl help"},
		{[]string{"--output", "json", "frob"}, `unknown command "frob"`, "hostctl help"},
		{[]string{"instance", "frob"}, `unknown command "instance frob"`, "hostctl instance --help"},
		{[]string{"instance"}, "instance needs a subcommand: apply, list", "hostctl instance --help"},
		{[]string{"--bogus", "instance", "list"}, "flag provided but not defined: -bogus", "hostctl help"},
		{[]string{"instance", "show"}, "exactly one instance name", "hostctl instance show --help"},
		{[]string{"instance", "list", "--output", "yaml"}, `--output "yaml"`, "hostctl instance list --help"},
		{[]string{"completion", "tcsh"}, `unknown shell "tcsh"`, "hostctl completion --help"},
	} {
		code, out, errOut := hostctl(t, tc.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.says) || !strings.Contains(errOut, "Run '"+tc.pre) {
			t.Errorf("%v: exit %d, stdout %q, stderr:\n%s", tc.args, code, out, errOut)
		}
		if lines := strings.Count(errOut, "\n"); lines > 2 {
			t.Errorf("%v: %d lines of error, want a short one:\n%s", tc.args, lines, errOut)
		}
	}
}

// TestClientFlagsBeforeCommand: the client flags work before the command
// as after it (kubectl, virsh): both reach the same daemon.
func TestClientFlagsBeforeCommand(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "absent.sock")
	for _, args := range [][]string{
		{"--socket", sock, "instance", "list"},
		{"--socket=" + sock, "--output", "json", "instance", "list"},
		{"instance", "list", "--socket", sock},
		{"--output", "json", "instance", "show", "x", "--socket", sock},
	} {
		code, _, errOut := hostctl(t, args...)
		if code != 1 || !strings.Contains(errOut, "dial unix "+sock) {
			t.Errorf("%v: exit %d:\n%s", args, code, errOut)
		}
	}
	t.Setenv(cli.TokenEnv, "")
	if code, _, errOut := hostctl(t, "--api", "http://127.0.0.1:1", "instance", "list"); code != 2 || !strings.Contains(errOut, "$"+cli.TokenEnv) {
		t.Errorf("--api before the command: exit %d:\n%s", code, errOut)
	}
}

// TestCompletionScripts: the scripts are generated from the command
// table; the bash one completes commands, subcommands and flags when run
// by bash itself.
func TestCompletionScripts(t *testing.T) {
	code, script, errOut := hostctl(t, "completion", "bash")
	if code != 0 || errOut != "" {
		t.Fatalf("completion bash: exit %d: %s", code, errOut)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	file := filepath.Join(t.TempDir(), "hostctl.bash")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string // the words typed so far; the last one is completed
		want string
	}{
		{"hostctl ", "instance network configdrive token help completion"},
		{"hostctl ins", "instance"},
		{"hostctl instance ", "apply list show delete start stop attach-disk detach-disk attach-nic detach-nic"},
		{"hostctl instance attach-d", "attach-disk"},
		{"hostctl instance attach-disk web-1 --s", "--serial --size --socket"},
		{"hostctl --output json instance li", "list"},
		{"hostctl instance stop web-1 --t", "--timeout"},
		{"hostctl network setup-metadata --d", "--dry-run"},
		{"hostctl --a", "--api"},
		{"hostctl configdrive build x -", "--format -o --api --output --socket --help"},
	} {
		words := strings.Split(tc.line, " ")
		cmd := exec.Command(bash, "--norc", "-c", `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _hostctl; echo "${COMPREPLY[*]}"`, "bash", file)
		cmd.Args = append(cmd.Args, words...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		got := strings.Fields(string(out))
		for _, w := range strings.Fields(tc.want) {
			if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+w+" ") {
				t.Errorf("%q completes to %q, missing %q", tc.line, got, w)
			}
		}
		if tc.line == "hostctl ins" && len(got) != 1 {
			t.Errorf("%q completes to %q, want only instance", tc.line, got)
		}
	}

	code, zsh, errOut := hostctl(t, "completion", "zsh")
	if code != 0 || !strings.HasPrefix(zsh, "#compdef hostctl\n") || !strings.Contains(zsh, `'attach-disk:create and attach a disk'`) {
		t.Fatalf("completion zsh: exit %d: %s\n%s", code, errOut, zsh)
	}
	zshBin := testenv.LookPath(t, "zsh") // skips (fails in CI) without it: the zsh script's syntax is not checked
	zfile := filepath.Join(t.TempDir(), "_hostctl")
	if err := os.WriteFile(zfile, []byte(zsh), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(zshBin, "-n", zfile).CombinedOutput(); err != nil {
		t.Errorf("zsh -n: %v\n%s", err, out)
	}

	code, fish, errOut := hostctl(t, "completion", "fish")
	if code != 0 || errOut != "" {
		t.Fatalf("completion fish: exit %d: %s", code, errOut)
	}
	checkFishCompletion(t, []byte(fish))
}

// checkFishCompletion has fish load the script and complete command
// lines with it (complete -C), as it does at a prompt.
func checkFishCompletion(t *testing.T, script []byte) {
	t.Helper()
	fishBin := testenv.LookPath(t, "fish")
	file := filepath.Join(t.TempDir(), "hostctl.fish")
	if err := os.WriteFile(file, script, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string
		want []string // candidates (before the tab and description)
		only bool     // exactly these
	}{
		{"hostctl inst", []string{"instance"}, true},
		{"hostctl ", []string{"instance", "network", "configdrive", "token", "help", "completion", "man"}, false},
		{"hostctl --so", []string{"--socket"}, true},
		{"hostctl instance sh", []string{"shelve", "show"}, true},
		{"hostctl --output json instance li", []string{"list"}, true},
		{"hostctl instance attach-disk web-1 --s", []string{"--serial", "--size", "--socket"}, true},
		{"hostctl configdrive build x -", []string{"-o", "--format", "--api", "--output", "--socket", "--help"}, false},
	} {
		out, err := exec.Command(fishBin, "--no-config", "-c", `source $argv[1]; and complete -C"$argv[2]"`, file, tc.line).CombinedOutput()
		if err != nil {
			t.Fatalf("fish completing %q: %v\n%s", tc.line, err, out)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			w, _, _ := strings.Cut(l, "\t")
			got = append(got, w)
		}
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("fish completes %q to %q, missing %q", tc.line, got, w)
			}
		}
		if tc.only && len(got) != len(tc.want) {
			t.Errorf("fish completes %q to %q, want only %q", tc.line, got, tc.want)
		}
	}
}
