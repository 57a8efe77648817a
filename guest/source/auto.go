package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Auto reads every transport the guest has and returns the document of
// the newest metadata revision: the firmware (fw_cfg, fixed from the
// guest's start), the config drive (its medium follows every publish while
// the guest runs), and the metadata service. The two local ones are always
// read (no mount, no network); the service is asked when there is no
// usable drive — a guest without one learns of changes after its start
// from the service only — with one round over its URLs when the firmware
// already gave a document, so a guest without network is not held up.
// With equal revisions the firmware is preferred, then the drive. The
// firmware and the drive are read concurrently.
//
// A transport that is present but unusable (a truncated or invalid
// firmware entry, a drive that does not parse) is reported in
// Document.Sources, and the next transport is used. When none gives a
// document, Fetch returns the errors of all of them and the caller changes
// nothing.
type Auto struct {
	// Firmware is nil to leave the firmware alone.
	Firmware *Firmware
	Drive    *ConfigDrive
	// HTTP is nil to never ask the metadata service.
	HTTP *HTTP
	// Log, when set, hears at debug level how long each transport took
	// (the first pass holds the boot; this says where that time goes).
	Log *slog.Logger
}

func (a *Auto) String() string {
	var s []string
	if a.Firmware != nil {
		s = append(s, "firmware")
	}
	if a.Drive != nil {
		s = append(s, "config drive")
	}
	if a.HTTP != nil {
		s = append(s, a.HTTP.String())
	}
	return "newest of " + strings.Join(s, ", ")
}

// Fetch implements Source.
func (a *Auto) Fetch(ctx context.Context) (*Document, error) {
	var (
		docs    []*Document
		results []SourceResult
		errs    []error
	)
	add := func(kind string, d *Document, err error, absent bool, elapsed time.Duration) {
		if a.Log != nil && ctx.Err() == nil {
			if err != nil {
				a.Log.Debug("transport read", "transport", kind, "elapsed", elapsed.Round(time.Millisecond), "err", err)
			} else {
				a.Log.Debug("transport read", "transport", kind, "elapsed", elapsed.Round(time.Millisecond), "revision", d.Revision)
			}
		}
		switch {
		case err == nil:
			docs = append(docs, d)
			results = append(results, SourceResult{Source: kind, Origin: d.Origin, Revision: d.Revision})
		case ctx.Err() != nil:
		default:
			results = append(results, SourceResult{Source: kind, Absent: absent, Error: err.Error()})
			errs = append(errs, err)
		}
	}
	// The firmware (which may load the qemu_fw_cfg module first) and the
	// drive are read at the same time: both wait on emulated devices,
	// and the unit holds boot until the first pass ends.
	type result struct {
		d       *Document
		err     error
		elapsed time.Duration
	}
	var fw chan result
	if a.Firmware != nil {
		fw = make(chan result, 1)
		go func() {
			start := time.Now()
			d, err := a.Firmware.Fetch(ctx)
			fw <- result{d, err, time.Since(start)}
		}()
	}
	var drive result
	if a.Drive != nil {
		start := time.Now()
		drive.d, drive.err = a.Drive.Fetch(ctx)
		drive.elapsed = time.Since(start)
	}
	if fw != nil {
		r := <-fw
		add(KindFirmware, r.d, r.err, errors.Is(r.err, ErrNoFirmware), r.elapsed)
	}
	driveOK := false
	if a.Drive != nil {
		add(KindDrive, drive.d, drive.err, errors.Is(drive.err, ErrNoDrive), drive.elapsed)
		driveOK = drive.err == nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if a.HTTP != nil && !driveOK {
		var d *Document
		var err error
		start := time.Now()
		if len(docs) > 0 {
			d, err = a.HTTP.FetchOnce(ctx)
		} else {
			d, err = a.HTTP.Fetch(ctx)
		}
		add(KindHTTP, d, err, false, time.Since(start))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(docs) == 0 {
		// Say what is wrong with the transports that are there; that the
		// others are absent only matters when none is there.
		var present []error
		for _, e := range errs {
			if !errors.Is(e, ErrNoDrive) && !errors.Is(e, ErrNoFirmware) {
				present = append(present, e)
			}
		}
		if len(present) == 0 {
			present = errs
		}
		if len(present) == 1 {
			return nil, present[0]
		}
		return nil, fmt.Errorf("no transport gave usable metadata: %w", errors.Join(present...))
	}
	best := 0
	for i, d := range docs {
		if d.Revision > docs[best].Revision {
			best = i
		}
	}
	doc := docs[best]
	for i := range results {
		if results[i].Error == "" && results[i].Origin == doc.Origin {
			results[i].Used = true
		}
	}
	doc.Sources = results
	return doc, nil
}

// Problems lists what is wrong with transports that are present: a
// firmware entry that is missing, truncated or invalid, a drive that does
// not parse. An absent transport and an unreachable metadata service are
// no problems.
func (d *Document) Problems() []string {
	var out []string
	for _, r := range d.Sources {
		if r.Error == "" || r.Absent || r.Source == KindHTTP {
			continue
		}
		out = append(out, fmt.Sprintf("%s not used: %s", r.Source, r.Error))
	}
	return out
}
