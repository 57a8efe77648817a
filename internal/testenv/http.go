package testenv

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// HTTP sends a request with the headers h and the body (none when empty)
// and returns the status and the response body; a request that cannot
// be made or sent fails the test.
func HTTP(t testing.TB, method, url string, h http.Header, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
