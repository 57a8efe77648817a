//go:build !linux

package guestvm

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }
