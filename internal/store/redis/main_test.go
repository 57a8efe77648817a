package redis

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// quietLogger drops go-redis's routine lines that these tests provoke on
// purpose (failed dials while a server is down, sentinel discovery on
// every Open) and passes the rest on.
type quietLogger struct{ l *log.Logger }

func (q quietLogger) Printf(_ context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	for _, routine := range []string{"failed to dial", "sentinel: new master", "sentinel: selected addr", "connection refused"} {
		if strings.Contains(msg, routine) {
			return
		}
	}
	if strings.Contains(msg, "sentinel: GetMasterAddrByName") && strings.Contains(msg, "context canceled") {
		return // a store closed at the end of a test
	}
	q.l.Print(msg)
}

func TestMain(m *testing.M) {
	goredis.SetLogger(quietLogger{log.New(os.Stderr, "redis: ", log.LstdFlags)})
	os.Exit(m.Run())
}
