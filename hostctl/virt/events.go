package virt

import (
	"fmt"

	libvirt "github.com/digitalocean/go-libvirt"
)

// EventKind says what happened.
type EventKind string

// Domain lifecycle events (libvirt's VIR_DOMAIN_EVENT_*), device events,
// and the connection's own state changes.
const (
	EventDefined     EventKind = "defined"
	EventUndefined   EventKind = "undefined"
	EventStarted     EventKind = "started"
	EventSuspended   EventKind = "suspended"
	EventResumed     EventKind = "resumed"
	EventStopped     EventKind = "stopped"
	EventShutdown    EventKind = "shutdown" // the guest finished shutting down; EventStopped follows
	EventPMSuspended EventKind = "pmsuspended"
	EventCrashed     EventKind = "crashed"

	// EventDeviceAdded: a device was hot-plugged (DeviceAlias).
	EventDeviceAdded EventKind = "device-added"
	// EventDeviceRemoved: a device left the running domain (DeviceAlias);
	// this completes an asynchronous live detach.
	EventDeviceRemoved EventKind = "device-removed"
	// EventDeviceRemovalFailed: the guest refused a detach (DeviceAlias).
	EventDeviceRemovalFailed EventKind = "device-removal-failed"

	// EventDisconnected: the connection to libvirtd was lost; Conn is
	// reconnecting. No domain.
	EventDisconnected EventKind = "disconnected"
	// EventReconnected: the connection is back and events are subscribed
	// again. Events in between were lost: reconcile. No domain.
	EventReconnected EventKind = "reconnected"
)

var lifecycleKinds = map[libvirt.DomainEventType]EventKind{
	libvirt.DomainEventDefined:     EventDefined,
	libvirt.DomainEventUndefined:   EventUndefined,
	libvirt.DomainEventStarted:     EventStarted,
	libvirt.DomainEventSuspended:   EventSuspended,
	libvirt.DomainEventResumed:     EventResumed,
	libvirt.DomainEventStopped:     EventStopped,
	libvirt.DomainEventShutdown:    EventShutdown,
	libvirt.DomainEventPmsuspended: EventPMSuspended,
	libvirt.DomainEventCrashed:     EventCrashed,
}

// Event is one domain or connection event.
type Event struct {
	Kind EventKind
	// Domain and UUID name the domain (empty for connection events).
	Domain string
	UUID   string
	// Detail is libvirt's detail code of a lifecycle event (e.g. for
	// EventStopped: 0 shutdown, 1 destroyed, 2 crashed).
	Detail int32
	// DeviceAlias is the device of a device event; ParseAlias maps it to
	// the spec device.
	DeviceAlias string
}

func (e Event) String() string {
	s := string(e.Kind)
	if e.Domain != "" {
		s += " " + e.Domain
	}
	if e.DeviceAlias != "" {
		s += " " + e.DeviceAlias
	}
	return s
}

// convertEvent turns a go-libvirt event message into an Event.
func convertEvent(raw any) (Event, bool) {
	switch m := raw.(type) {
	case *libvirt.DomainEventCallbackLifecycleMsg:
		kind, ok := lifecycleKinds[libvirt.DomainEventType(m.Msg.Event)]
		if !ok {
			kind = EventKind(fmt.Sprintf("lifecycle-%d", m.Msg.Event))
		}
		return Event{Kind: kind, Domain: m.Msg.Dom.Name, UUID: formatUUID(m.Msg.Dom.UUID), Detail: m.Msg.Detail}, true
	case *libvirt.DomainEventCallbackDeviceRemovedMsg:
		return Event{Kind: EventDeviceRemoved, Domain: m.Msg.Dom.Name, UUID: formatUUID(m.Msg.Dom.UUID), DeviceAlias: m.Msg.DevAlias}, true
	case *libvirt.DomainEventCallbackDeviceAddedMsg:
		return Event{Kind: EventDeviceAdded, Domain: m.Dom.Name, UUID: formatUUID(m.Dom.UUID), DeviceAlias: m.DevAlias}, true
	case *libvirt.DomainEventCallbackDeviceRemovalFailedMsg:
		return Event{Kind: EventDeviceRemovalFailed, Domain: m.Dom.Name, UUID: formatUUID(m.Dom.UUID), DeviceAlias: m.DevAlias}, true
	}
	return Event{}, false
}
