// Command gentest calls hostctl's admin API through a client generated
// from its OpenAPI document: it applies an instance, shows it and lists
// every host's instances, and prints what it got.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"

	"gentest/hostctlapi"
)

func main() {
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "gentest:", err)
		os.Exit(1)
	}
}

func run(socket, name string) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	c, err := hostctlapi.NewClientWithResponses("http://hostctl", hostctlapi.WithHTTPClient(hc))
	if err != nil {
		return err
	}
	ctx := context.Background()
	addrs := []string{"10.77.0.1"}
	applied, err := c.ApplyInstanceWithResponse(ctx, hostctlapi.InstanceSpec{Name: name, Addresses: &addrs})
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if applied.JSON200 == nil {
		return fmt.Errorf("apply: %s: %s", applied.Status(), applied.Body)
	}
	got, err := c.GetInstanceWithResponse(ctx, name)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if got.JSON200 == nil {
		return fmt.Errorf("get: %s: %s", got.Status(), got.Body)
	}
	all := hostctlapi.ListInstancesParamsAllHostsN1
	list, err := c.ListInstancesWithResponse(ctx, &hostctlapi.ListInstancesParams{AllHosts: &all})
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if list.JSON200 == nil {
		return fmt.Errorf("list: %s: %s", list.Status(), list.Body)
	}
	missing, err := c.GetInstanceWithResponse(ctx, name+"-absent")
	if err != nil {
		return fmt.Errorf("get absent: %w", err)
	}
	if missing.JSON404 == nil {
		return fmt.Errorf("get absent: %s: %s, want a 404 error body", missing.Status(), missing.Body)
	}
	fmt.Printf("applied %s revision %d; got %s addresses %v; listed %d; absent: %d %q\n",
		applied.JSON200.Spec.Name, applied.JSON200.Revision, got.JSON200.Spec.Name, *got.JSON200.Spec.Addresses, len(*list.JSON200), missing.StatusCode(), missing.JSON404.Error)
	return nil
}
