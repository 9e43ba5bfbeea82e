{{/*
Names, labels and the agent configuration.

Every helper here takes a "root-shaped" dict ({Chart, Release, Values}):
either the chart's own root context `$`, or the scope that
"redlock-agent.scope" builds for an application chart that includes the
sidecar (see _sidecar.tpl).
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "redlock-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every resource name: fullnameOverride, else "<release>-<name>",
else just the release name when it already contains the chart name.
Capped at 63 characters, the limit of a DNS label.
*/}}
{{- define "redlock-agent.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<chart>-<version>" for the helm.sh/chart label. */}}
{{- define "redlock-agent.chart" -}}
{{- printf "%s-%s" .Chart.Name (.Chart.Version | default "0") | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The labels that select this release's pods; never change them after install. */}}
{{- define "redlock-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "redlock-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every resource. */}}
{{- define "redlock-agent.labels" -}}
helm.sh/chart: {{ include "redlock-agent.chart" . }}
{{ include "redlock-agent.selectorLabels" . }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: redlock
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* "repository:tag" or "repository@digest" from an image block; the tag defaults to appVersion. */}}
{{- define "redlock-agent.image" -}}
{{- $image := .image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (toString ($image.tag | default .appVersion)) -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret holding the masters' password (auth.existingSecret or the chart-created one). */}}
{{- define "redlock-agent.authSecretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth" (include "redlock-agent.fullname" .)) -}}
{{- end -}}

{{/* Name of the agent's ConfigMap. */}}
{{- define "redlock-agent.configMapName" -}}
{{- printf "%s-config" (include "redlock-agent.fullname" .) -}}
{{- end -}}

{{/*
The masters the agent locks over, as a YAML list of
{name, url, cluster, secretName, secretKey}: url for one server, or cluster
(the seed URLs of one Redis Cluster) with url empty; secretName is empty
when the master needs no password. Deployed masters are
"<fullname>-master-<i>", i = 1..N, reached through their own Service;
external ones come from values as given.
*/}}
{{- define "redlock-agent.masterList" -}}
{{- $masters := list -}}
{{- $auth := .Values.auth -}}
{{- if .Values.masters.deploy -}}
{{- $prefix := include "redlock-agent.fullname" . | trunc 45 | trimSuffix "-" -}}
{{- range $i := untilStep 1 (add1 (int .Values.masters.count) | int) 1 -}}
{{- $svc := printf "%s-master-%d" $prefix $i -}}
{{- $url := printf "redis://%s.%s.svc.%s:%d" $svc $.Release.Namespace $.Values.clusterDomain (int $.Values.masters.port) -}}
{{- $m := dict "name" (printf "master-%d" $i) "url" $url "cluster" list "resourceName" $svc "secretName" "" "secretKey" "" -}}
{{- if $auth.enabled -}}
{{- $_ := set $m "secretName" (include "redlock-agent.authSecretName" $) -}}
{{- $_ := set $m "secretKey" $auth.existingSecretPasswordKey -}}
{{- end -}}
{{- $masters = append $masters $m -}}
{{- end -}}
{{- else -}}
{{- range $ext := .Values.masters.external -}}
{{- $m := dict "name" $ext.name "url" (get $ext "url" | default "") "cluster" (get $ext "cluster" | default list) "resourceName" "" "secretName" "" "secretKey" "" -}}
{{- $own := get $ext "passwordSecret" -}}
{{- if $own -}}
{{- $_ := set $m "secretName" $own.name -}}
{{- $_ := set $m "secretKey" $own.key -}}
{{- else if $auth.enabled -}}
{{- $_ := set $m "secretName" (include "redlock-agent.authSecretName" $) -}}
{{- $_ := set $m "secretKey" $auth.existingSecretPasswordKey -}}
{{- end -}}
{{- $masters = append $masters $m -}}
{{- end -}}
{{- end -}}
{{- toYaml $masters -}}
{{- end -}}

{{/* Where the agent reads master i's password from (1-based). */}}
{{- define "redlock-agent.passwordFile" -}}
{{- printf "/var/run/secrets/redlock/%s" . -}}
{{- end -}}
{{- define "redlock-agent.passwordEnv" -}}
{{- printf "REDLOCK_MASTER_%d_PASSWORD" (int .) -}}
{{- end -}}

{{/*
Refuse values the agent would refuse, or that would break Redlock's
guarantees, with a message naming the value. The schema catches most of
these first; this also covers `--skip-schema-validation` and what JSON
Schema cannot say (an odd number of external masters, unique names, no
node shared by two masters).
*/}}
{{- define "redlock-agent.validate" -}}
{{- /* A null value is no key at all once Helm has merged the values. */ -}}
{{- if and (eq .Values.mode "node") (or (not (hasKey .Values.sidecar "runAsUser")) (kindIs "invalid" (get .Values.sidecar "runAsUser"))) -}}
{{- fail "sidecar.runAsUser: null, but mode=node gives the socket's host directory (node.socketDir) to the agent's uid; set it (65532 is the image's user)" -}}
{{- end -}}
{{- if and .Values.sidecar.native (ne .Values.mode "node") (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "sidecar.native: native sidecars (initContainers with restartPolicy Always) need Kubernetes 1.29 or later, this cluster runs %s; set sidecar.native=false" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- $lock := .Values.config.lock -}}
{{- if gt (int $lock.maxWaitersPerUid) (int $lock.maxWaiters) -}}
{{- fail (printf "config.lock.maxWaitersPerUid: %d is above config.lock.maxWaiters (%d); lower it too (three quarters of maxWaiters leaves room for other uids)" (int $lock.maxWaitersPerUid) (int $lock.maxWaiters)) -}}
{{- end -}}
{{- $m := .Values.masters -}}
{{- $n := 0 -}}
{{- if $m.deploy -}}
{{- if $m.external -}}
{{- fail "masters: set either masters.deploy=true (the chart runs the masters) or masters.external (masters run elsewhere), not both" -}}
{{- end -}}
{{- $n = int $m.count -}}
{{- range $arg := $m.extraArgs -}}
{{- if regexMatch "(?i)(replicaof|slaveof)" (toString $arg) -}}
{{- fail (printf "masters.extraArgs: %q: Redlock masters are independent; replication is not allowed" (toString $arg)) -}}
{{- end -}}
{{- end -}}
{{- if and $m.pdb.enabled (gt (int $m.pdb.maxUnavailable) (div (sub $n 1) 2)) -}}
{{- fail (printf "masters.pdb.maxUnavailable: %d would let voluntary disruptions break the quorum of %d masters; use at most %d" (int $m.pdb.maxUnavailable) $n (div (sub $n 1) 2)) -}}
{{- end -}}
{{- else -}}
{{- $n = len $m.external -}}
{{- if eq $n 0 -}}
{{- fail "masters.external: empty while masters.deploy=false; list the masters the agent locks over" -}}
{{- end -}}
{{- $seen := dict -}}
{{- $nodes := dict -}}
{{- range $i, $ext := $m.external -}}
{{- if hasKey $seen $ext.name -}}
{{- fail (printf "masters.external[%d].name: %q is used twice; master names must be unique" $i $ext.name) -}}
{{- end -}}
{{- $_ := set $seen $ext.name true -}}
{{- $hasUrl := hasKey $ext "url" -}}
{{- $hasCluster := hasKey $ext "cluster" -}}
{{- if and $hasUrl $hasCluster -}}
{{- fail (printf "masters.external[%d]: both url and cluster are set; a master is one server (url) or one Redis Cluster (cluster: its seed URLs), not both" $i) -}}
{{- end -}}
{{- if not (or $hasUrl $hasCluster) -}}
{{- fail (printf "masters.external[%d]: neither url nor cluster is set; give url (one server) or cluster (the seed URLs of one Redis Cluster)" $i) -}}
{{- end -}}
{{- $urls := list -}}
{{- if $hasUrl -}}
{{- $urls = list (dict "field" (printf "masters.external[%d].url" $i) "url" (toString $ext.url)) -}}
{{- else -}}
{{- if not $ext.cluster -}}
{{- fail (printf "masters.external[%d].cluster: empty; list at least one seed URL of the Redis Cluster" $i) -}}
{{- end -}}
{{- range $j, $seed := $ext.cluster -}}
{{- $urls = append $urls (dict "field" (printf "masters.external[%d].cluster[%d]" $i $j) "url" (toString $seed)) -}}
{{- end -}}
{{- end -}}
{{- range $u := $urls -}}
{{- if not (regexMatch "^rediss?://" $u.url) -}}
{{- fail (printf "%s: not a redis:// or rediss:// URL: %q" $u.field $u.url) -}}
{{- end -}}
{{- $parsed := urlParse $u.url -}}
{{- if and $parsed.userinfo (contains ":" $parsed.userinfo) -}}
{{- fail (printf "%s: contains a password; it would land in the ConfigMap. Put it in a Secret and set masters.external[%d].passwordSecret" $u.field $i) -}}
{{- end -}}
{{- /* One node must not vote for two masters: compare host:port (6379 when the URL gives none). */ -}}
{{- $node := lower $parsed.host -}}
{{- if not (regexMatch ":[0-9]+$" $node) -}}
{{- $node = printf "%s:6379" $node -}}
{{- end -}}
{{- $other := get $nodes $node -}}
{{- if and $other (ne (int $other.master) $i) -}}
{{- fail (printf "%s: %s is also a node of masters.external[%d] (%s); two masters must not share a node, or it would vote twice" $u.field $node (int $other.master) $other.field) -}}
{{- end -}}
{{- $_ := set $nodes $node (dict "master" $i "field" $u.field) -}}
{{- end -}}
{{- if and (not (get $ext "passwordSecret")) $.Values.auth.enabled (not $.Values.auth.existingSecret) (not $.Values.auth.password) -}}
{{- fail (printf "masters.external[%d]: auth.enabled=true but no password is known for it; set masters.external[%d].passwordSecret, auth.existingSecret or auth.password (or auth.enabled=false)" $i $i) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if eq (mod $n 2) 0 -}}
{{- fail (printf "masters: %d masters is an even number; Redlock needs an odd N (3, 5, 7) so that N/2+1 is a strict majority" $n) -}}
{{- end -}}
{{- end -}}

{{/*
The agent's config.yaml, key for key as in config.example.yaml.
Passwords are never inlined: each master points at a password_file (a
mounted Secret) or a password_env (an env var from a Secret).
*/}}
{{- define "redlock-agent.config" -}}
{{- $c := .Values.config -}}
# agent.name is left to REDLOCK_AGENT_NAME, which the sidecar sets to the pod name.
agent:
  workers: {{ int $c.agent.workers }}
socket:
  path: {{ printf "%s/%s" $c.socket.dir $c.socket.name | quote }}
  mode: {{ $c.socket.mode | quote }}
  max_connections: {{ int $c.socket.maxConnections }}
  request_timeout: {{ $c.socket.requestTimeout | quote }}
  allow_uids: {{ $c.socket.allowUids | toJson }}
  allow_gids: {{ $c.socket.allowGids | toJson }}
  max_connections_per_uid: {{ int $c.socket.maxConnectionsPerUid }}
  # Whose tokens a connection may use: node mode's node.isolate; a sidecar
  # serves one application, whose tokens are bearer secrets.
  isolate: {{ if eq .Values.mode "node" }}{{ .Values.node.isolate }}{{ else }}none{{ end }}
admin:
  socket:
    path: {{ printf "%s/%s" $c.admin.socket.dir $c.admin.socket.name | quote }}
    mode: {{ $c.admin.socket.mode | quote }}
  allow_uids: {{ $c.admin.allowUids | toJson }}
metrics:
  listen: {{ printf "%s:%d" $c.metrics.address (int $c.metrics.port) | quote }}
  max_connections: {{ int $c.metrics.maxConnections }}
log:
  format: {{ $c.log.format }}
  level: {{ $c.log.level | quote }}
masters:
{{- range $i, $m := include "redlock-agent.masterList" . | fromYamlArray }}
  - name: {{ $m.name | quote }}
    {{- if $m.cluster }}
    # One Redis Cluster, one Redlock master: its seed nodes.
    cluster:
    {{- range $seed := $m.cluster }}
      - {{ $seed | quote }}
    {{- end }}
    {{- else }}
    url: {{ $m.url | quote }}
    {{- end }}
    {{- if $m.secretName }}
    {{- if eq $.Values.auth.agentDelivery "env" }}
    password_env: {{ include "redlock-agent.passwordEnv" (add1 $i) }}
    {{- else }}
    password_file: {{ include "redlock-agent.passwordFile" $m.name | quote }}
    {{- end }}
    {{- end }}
{{- end }}
lock:
  key_prefix: {{ $c.lock.keyPrefix | quote }}
  default_ttl: {{ $c.lock.defaultTtl | quote }}
  max_ttl: {{ $c.lock.maxTtl | quote }}
  node_timeout: {{ $c.lock.nodeTimeout | quote }}
  drift_factor: {{ $c.lock.driftFactor }}
  retry_delay: {{ $c.lock.retryDelay | quote }}
  retry_jitter: {{ $c.lock.retryJitter | quote }}
  max_hold: {{ $c.lock.maxHold | quote }}
  max_waiters: {{ int $c.lock.maxWaiters }}
  max_waiters_per_uid: {{ int $c.lock.maxWaitersPerUid }}
  max_streams_per_uid: {{ int $c.lock.maxStreamsPerUid }}
  fence: {{ $c.lock.fence | quote }}
health:
  interval: {{ $c.health.interval | quote }}
  idle_interval: {{ $c.health.idleInterval | quote }}
delayed_restart:
  enabled: {{ $c.delayedRestart.enabled }}
  extra: {{ $c.delayedRestart.extra | quote }}
leak_scan:
  interval: {{ $c.leakScan.interval | quote }}
  count: {{ int $c.leakScan.count }}
  keys_per_second: {{ int $c.leakScan.keysPerSecond }}
  repair: {{ $c.leakScan.repair }}
shutdown:
  grace: {{ $c.shutdown.grace | quote }}
tracing:
  otlp_endpoint: {{ if $c.tracing.otlpEndpoint }}{{ $c.tracing.otlpEndpoint | quote }}{{ else }}null{{ end }}
  sample_ratio: {{ $c.tracing.sampleRatio }}
{{- end -}}
