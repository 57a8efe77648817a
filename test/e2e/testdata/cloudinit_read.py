"""Read an instance's metadata the way cloud-init does, and print it as JSON.

Usage (run with Debian's /usr/bin/python3, which sees the cloud-init package):

    cloudinit_read.py drive DIR KNOWN_MACS_JSON
        ConfigDriveReader(DIR).read_v2() on an unpacked config drive.
    cloudinit_read.py service BASE_URL KNOWN_MACS_JSON
        read_metadata_service(BASE_URL) against a running metadata service,
        with the EC2 crawl (hard-coded to 169.254.169.254) disabled.

KNOWN_MACS_JSON maps MAC addresses to interface names for
convert_net_json, so the host's own interfaces do not matter.

Byte strings (user data, injected files) are printed base64-encoded, so the
caller can compare them exactly. A convert_net_json failure is reported in
"netconfig_error" rather than aborting, so the caller can assert on it.
"""

import base64
import copy
import json
import sys

from cloudinit.sources.helpers import openstack


def b64(v):
    if v is None:
        return None
    if isinstance(v, str):
        v = v.encode("utf-8")
    return base64.b64encode(v).decode("ascii")


def main():
    mode, src, macs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if mode == "drive":
        reader = openstack.ConfigDriveReader(src)
        version = reader._find_working_version()
        result = reader.read_v2()
    elif mode == "service":
        from cloudinit.sources.helpers import ec2

        # MetadataReader crawls EC2 metadata from the hard-coded
        # 169.254.169.254, ignoring the base URL (see the notes, 4.4).
        ec2.get_instance_metadata = lambda *a, **kw: {}
        from cloudinit.sources.DataSourceOpenStack import read_metadata_service

        version = openstack.MetadataReader(
            src, timeout=2, retries=0
        )._find_working_version()
        result = read_metadata_service(src, timeout=2, retries=0)
    else:
        sys.exit("unknown mode %r" % mode)

    md = result["metadata"]
    out = {
        "version": version,
        "read_version": result.get("version"),
        "result_keys": sorted(result),
        "metadata": {
            k: md.get(k)
            for k in (
                "uuid",
                "instance-id",
                "hostname",
                "local-hostname",
                "name",
                "public_keys",
                "availability_zone",
                "project_id",
                "meta",
                "launch_index",
            )
        },
        "metadata_keys": sorted(md),
        "random_seed_len": len(md["random_seed"])
        if isinstance(md.get("random_seed"), bytes)
        else None,
        "has_devices": "devices" in md,
        "devices": md.get("devices"),
        "userdata_b64": b64(result.get("userdata")),
        # convert_net_json rewrites the services entries in place
        # (type "dns" becomes "nameserver"): keep the document as read.
        "networkdata": copy.deepcopy(result.get("networkdata")),
        "files": {p: b64(c) for p, c in (result.get("files") or {}).items()},
        "ec2_metadata": result.get("ec2-metadata"),
        "vendordata": result.get("vendordata"),
    }
    try:
        out["netconfig"] = openstack.convert_net_json(
            result.get("networkdata"), known_macs=macs
        )
    except Exception as e:  # reported, asserted on by the caller
        out["netconfig_error"] = "%s: %s" % (type(e).__name__, e)
    json.dump(out, sys.stdout, sort_keys=True, default=b64)


if __name__ == "__main__":
    main()
