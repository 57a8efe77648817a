package metadata

// EC2 metadata versions Nova serves (nova/api/metadata/base.py VERSIONS);
// EC2 "latest" is the last of them.
var EC2Versions = []string{
	"1.0", "2007-01-19", "2007-03-01", "2007-08-29", "2007-10-10",
	"2007-12-15", "2008-02-01", "2008-09-01", "2009-04-04",
}

// EC2Latest is the EC2 version "latest" stands for.
const EC2Latest = "2009-04-04"

// OpenStack metadata versions and what each adds (OPENSTACK_VERSIONS).
const (
	Folsom    = "2012-08-10" // meta_data.json, user_data
	Grizzly   = "2013-04-04" // password; random_seed
	Havana    = "2013-10-17" // vendor_data.json
	Liberty   = "2015-10-15" // network_data.json; project_id
	NewtonOne = "2016-06-30" // devices
	NewtonTwo = "2016-10-06" // vendor_data2.json
	Ocata     = "2017-02-22" // vlan on nic devices
	Rocky     = "2018-08-27" // vf_trusted on nic devices
	Victoria  = "2020-10-14" // dedicated_cpus
	Epoxy     = "2025-04-04" // share devices (and vmeta's disk "encrypted", tagged pci devices)
)

// OpenStackVersions lists every OpenStack version in order; "latest" is
// the last of them.
var OpenStackVersions = []string{
	Folsom, Grizzly, Havana, Liberty, NewtonOne, NewtonTwo, Ocata, Rocky, Victoria, Epoxy,
}

// OpenStackLatest is the OpenStack version "latest" stands for.
const OpenStackLatest = Epoxy

// atLeast reports whether version v (a date, or "latest") is at or after
// min. Dates compare correctly as strings.
func atLeast(v, min string) bool {
	if v == "latest" {
		v = OpenStackLatest
	}
	return v >= min
}
