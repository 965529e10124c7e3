"""The pieces API objects are made of: `ApiModel` and `ModelSource` (base.py), CEL evaluated offline (cel.py),
Kubernetes' own field rules (k8s.py), a structural-schema check (openapi.py), a served model (served_model.py).

Below both the speculation modes (`specdec.modes`, which define their API blocks with them) and the CRDs
(`specdec.api`, which gather the modes' blocks from the registry), so neither reaches back up to the other.
"""
