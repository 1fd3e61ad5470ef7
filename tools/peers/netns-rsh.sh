#!/bin/sh
# mpirun's launch agent on the test bed (tools/peers/launch.cc, run_mpi_tcp):
# mpirun runs "netns-rsh.sh MAP HOST orted ARGS...", where MAP is
# "h1=ns1,h2=ns2,..." (a host name per network namespace), and this runs
# the command in HOST's namespace instead of over ssh.
map=$1
host=$2
shift 2
old_ifs=$IFS
IFS=,
for pair in $map; do
  if [ "${pair%%=*}" = "$host" ]; then
    IFS=$old_ifs
    exec ip netns exec "${pair#*=}" sh -c "$*"
  fi
done
echo "netns-rsh.sh: host '$host' is not in the map '$map'" >&2
exit 1
