"""What cloud-init's cc_mounts would mount from an instance's config drive.

Usage (Debian's /usr/bin/python3, which sees the cloud-init package):

    cloudinit_mounts.py DIR DEVICES_JSON

reads the unpacked config drive DIR with cloud-init's ConfigDriveReader,
and resolves the names of cc_mounts' default mounts (ephemeral0 at /mnt,
swap) and the other EC2 names the way cc_mounts does: sanitize_devname
with the datasource's device_name_to_device (the EC2
block-device-mapping). DEVICES_JSON lists the block devices the guest has
("/dev/vda", ...): they stand in for os.path.exists and /sys/block, and
the label lookup cloud-init falls back on (blkid) finds nothing, so the
host's own devices do not matter. Prints JSON: the block-device-mapping
and {name: device or null}.
"""

import json
import logging
import os
import sys

from cloudinit.config import cc_mounts
from cloudinit.sources.helpers import openstack


def main():
    src, devices = sys.argv[1], set(json.loads(sys.argv[2]))
    result = openstack.ConfigDriveReader(src).read_v2()

    real_exists = os.path.exists
    os.path.exists = lambda p: p in devices or (
        not p.startswith("/dev/") and not p.startswith("/sys/") and real_exists(p)
    )
    cc_mounts._is_block_device = lambda dev, part=None: dev in devices and part is None
    cc_mounts._get_nth_partition_for_device = lambda dev, n: None
    openstack.util.find_devs_with = lambda criteria=None, **kw: []

    class Source(openstack.SourceMixin):
        ec2_metadata = result.get("ec2-metadata") or {}

        def _remap_device(self, short_name):
            return None

    ds = Source()
    log = logging.getLogger("cloudinit_mounts")
    names = ["ephemeral0", "ephemeral1", "swap", "ami", "root", "ebs0", "ebs1"]
    out = {
        "block_device_mapping": ds.ec2_metadata.get("block-device-mapping"),
        "resolved": {
            n: cc_mounts.sanitize_devname(n, ds.device_name_to_device, log)
            for n in names
        },
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
