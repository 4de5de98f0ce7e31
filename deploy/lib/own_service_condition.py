"""The condition of the runtime account's self-check grant: `resource.name == "…/services/S"` for
the service S in every region it is deployed in, read from the project's policy (stdin: role,
member, condition title and expression per line, tab-separated, as gcloud's `value()` prints them),
with REGION added. One region gives the one-clause condition Terraform writes for one region.

Usage: own_service_condition.py ROLE MEMBER TITLE PROJECT SERVICE REGION < policy-lines
"""

import re
import sys

role, member, title, project, service, region = sys.argv[1:]
clause = re.compile(
    rf'resource\.name == "projects/{re.escape(project)}/locations/([a-z0-9-]+)/services/{re.escape(service)}"'
)
regions = {region}
for line in sys.stdin:
    fields = line.rstrip("\n").split("\t")
    if len(fields) == 4 and fields[:3] == [role, member, title]:
        regions |= {match.group(1) for match in clause.finditer(fields[3])}
print(" || ".join(f'resource.name == "projects/{project}/locations/{r}/services/{service}"' for r in sorted(regions)))
