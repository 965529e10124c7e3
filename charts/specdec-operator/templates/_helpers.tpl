{{/*
Expand the name of the chart.
*/}}
{{- define "specdec-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "specdec-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "specdec-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "specdec-operator.labels" -}}
helm.sh/chart: {{ include "specdec-operator.chart" . }}
{{ include "specdec-operator.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: specdec-operator
{{- end }}

{{/*
Selector labels
*/}}
{{- define "specdec-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specdec-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Create the name of the service account to use
*/}}
{{- define "specdec-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specdec-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator image: repository:tag, the tag defaulting to the chart's appVersion.
*/}}
{{- define "specdec-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The Lease of leader election: one per release (two releases in one namespace must not share it).
*/}}
{{- define "specdec-operator.leaseName" -}}
{{- include "specdec-operator.fullname" . }}
{{- end }}

{{/*
Checks the schema cannot express (they involve two values): fail with what to change.
*/}}
{{- define "specdec-operator.validateLeaderElection" -}}
{{- $le := .Values.leaderElection }}
{{- if and (gt (int .Values.replicas) 1) (not $le.enabled) }}
{{- fail (printf "replicas: %d needs leaderElection.enabled=true: without it every replica would reconcile (set replicas: 1, or enable leader election)" (int .Values.replicas)) }}
{{- end }}
{{- if $le.enabled }}
{{- if le (int $le.leaseDurationSeconds) (int $le.renewDeadlineSeconds) }}
{{- fail (printf "leaderElection.leaseDurationSeconds (%d) must be greater than leaderElection.renewDeadlineSeconds (%d)" (int $le.leaseDurationSeconds) (int $le.renewDeadlineSeconds)) }}
{{- end }}
{{- if le (float64 $le.renewDeadlineSeconds) (mulf 1.2 (float64 $le.retryPeriodSeconds)) }}
{{- fail (printf "leaderElection.renewDeadlineSeconds (%d) must be greater than 1.2 × leaderElection.retryPeriodSeconds (%d)" (int $le.renewDeadlineSeconds) (int $le.retryPeriodSeconds)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The rules of leader election (operator/specdec/kube/leader.py, on the client's kubernetes.leaderelection),
in a Role in the release namespace, where the Lease is: in both modes, since a namespaced install
watches other namespaces but elects in its own. Exactly the calls of its LeaseLock and of the release
on shutdown: read_namespaced_lease, create_namespaced_lease, replace_namespaced_lease. No list,
watch, patch or delete.
*/}}
{{- define "specdec-operator.leaseRules" -}}
# The first candidate creates the Lease (a create cannot be limited to a name: the name is in the body).
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
# Every candidate reads the Lease each retry period; the leader renews it, a standby takes it over and
# a leader that shuts down releases it, each by a replace (update). Only this release's Lease.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [{{ include "specdec-operator.leaseName" . | quote }}]
  verbs: ["get", "update"]
{{- end }}

{{/*
The RBAC rules of the operator, shared by the ClusterRole (cluster-wide) and the per-namespace
Roles (watchNamespaces). Exactly the API calls of operator/specdec/kube/client.py and the watches of
operator/specdec/handlers.py; nothing else. kopf runs `standalone` (no peering objects) with its own
event posting disabled, so it needs no rights beyond the watches (list + watch) below.
Not granted on purpose: secrets (a gated model's token Secret is mounted by the build pod, never read
by the operator), pods/log and pods/exec (failures are read from the pods' termination messages),
namespaces and customresourcedefinitions (kopf's optional discovery watches; it falls back to the
namespaces it is given and the resources served at start-up, and logs a warning).
*/}}
{{- define "specdec-operator.rules" -}}
# The user's API: read and watch every SpeculativeDeployment (kopf watch + the resync pass) ...
- apiGroups: ["specdec.io"]
  resources: ["speculativedeployments"]
  verbs: ["get", "list", "watch"]
# ... and write only their status (conditions, phase, replicas; merge patch on /status).
- apiGroups: ["specdec.io"]
  resources: ["speculativedeployments/status"]
  verbs: ["patch"]
# EngineBuilds are the operator's own objects: created per distinct engine recipe, watched,
# annotated while unused (patch), and deleted after engineRetentionSeconds.
- apiGroups: ["specdec.io"]
  resources: ["enginebuilds"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# EngineBuild status (phase, failed step, conditions).
- apiGroups: ["specdec.io"]
  resources: ["enginebuilds/status"]
  verbs: ["patch"]
# ModelCaches are the operator's own objects too: one per hf:// checkpoint (model, revision, cache
# claim), created before the EngineBuilds that read it, watched, annotated while unused (patch), and
# deleted after engineRetentionSeconds.
- apiGroups: ["specdec.io"]
  resources: ["modelcaches"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# ModelCache status (phase, size, conditions).
- apiGroups: ["specdec.io"]
  resources: ["modelcaches/status"]
  verbs: ["patch"]
# Engine-build and fetch Jobs: created once per EngineBuild or ModelCache (never changed; deleted by
# garbage collection through their owner reference), read and watched for progress (label-selected watch).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create"]
# Build and fetch pods (label-selected list + watch) for the failed step, exit code and termination message.
# Read-only: no create, no pods/log, no pods/exec.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# Runtime Deployments: server-side apply (PATCH; the API server also checks `create` when an apply
# creates the object), replica changes (merge patch), and the label-selected watch (list + watch) for
# rollouts.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch"]
# A target spanning several nodes runs in a LeaderWorkerSet (where LeaderWorkerSet is installed): created and
# server-side applied as the runtime Deployment is, and its label-selected watch (list + watch) for the groups.
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Its group's SSH key Secret: created once with the LeaderWorkerSet, never read, changed or deleted by the
# operator (its owner reference deletes it). No get or list: the operator reads no Secret.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
# The runtime's Service and ConfigMap: cached from a label-selected watch (list + watch, only the
# operator's own: app.kubernetes.io/managed-by=specdec-operator), then server-side apply (PATCH;
# `create` when it creates the object). Never deleted by the operator (owner references do that).
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "list", "watch", "create", "patch"]
# The shared engine-cache claim: cached from a label-selected watch, created once if missing; never
# changed or deleted by the operator. `get`: the capacity of a saveState deployment's capture claim.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create"]
# The operator's own Events on SpeculativeDeployments and EngineBuilds (kopf's are disabled); list:
# the Job controller's FailedCreate Events of a build Job that has no pod (the only place a pod the
# API server refuses shows up), read on demand, never watched.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "list"]
{{- end }}
