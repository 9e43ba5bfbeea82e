{{/*
The redlock-agent sidecar, as named templates an application chart can put
in its own pod spec. This chart's demo Deployment uses them the same way.

Argument, for every template below:
  $                         this chart's root context, or
  (dict "context" $)        the same, or, from an application chart that
                            depends on this chart (under `alias`, if any):
  (dict "context" $ "values" .Values.redlock "chartName" "redlock")
                            `values` is the dependency's values block (Helm
                            merges the chart defaults into it), `chartName`
                            its alias or "redlock-agent". The default
                            image tag is the dependency's appVersion (read
                            from .Subcharts); an optional "appVersion" key
                            or image.tag overrides it.

A pod template that carries the sidecar, in an application chart that
depends on redlock-agent under the alias "redlock":

  {{- $rl := dict "context" $ "values" .Values.redlock "chartName" "redlock" }}
  metadata:
    labels:
      {{- include "redlock-agent.sidecar.podLabels" $rl | nindent 6 }}
    annotations:
      {{- include "redlock-agent.sidecar.podAnnotations" $rl | nindent 6 }}
  spec:
    securityContext:
      fsGroup: 65532          # lets the app reach the socket (mode 0660)
    {{- if include "redlock-agent.sidecar.native" $rl }}
    initContainers:
      {{- include "redlock-agent.sidecar.initContainers" $rl | nindent 6 }}
    {{- end }}
    containers:
      - name: app
        env:
          {{- include "redlock-agent.sidecar.appEnv" $rl | nindent 10 }}
        volumeMounts:
          {{- include "redlock-agent.sidecar.socketVolumeMount" $rl | nindent 10 }}
      {{- if not (include "redlock-agent.sidecar.native" $rl) }}
      {{- include "redlock-agent.sidecar.containers" $rl | nindent 6 }}
      {{- end }}
    volumes:
      {{- include "redlock-agent.sidecar.volumes" $rl | nindent 6 }}

The agent's ConfigMap (and the auth Secret, unless auth.existingSecret) are
rendered by this chart, in its release namespace: the pod must live there.

With mode "node" the same pod template gets no agent container: the
agent runs once per node (templates/daemonset.yaml), "volumes" is the
node's socket directory (a hostPath), and the socket path, its mount and
REDLOCK_SOCKET stay as they are. The pod's fsGroup (or supplementalGroups)
lets the application in, as with the sidecar.
*/}}

{{/*
Internal: the argument above, turned into a root-shaped scope
{Chart: {Name, AppVersion}, Release: {Name, Namespace, Service}, Values}
as JSON (templates can only return strings). Use with `| fromJson`.
*/}}
{{- define "redlock-agent.sidecar.scope" -}}
{{- $ctx := . -}}
{{- $values := dict -}}
{{- $chartName := "" -}}
{{- $appVersion := "" -}}
{{- if hasKey . "context" -}}
{{- $ctx = .context -}}
{{- $values = get . "values" | default $ctx.Values -}}
{{- $chartName = get . "chartName" | default $ctx.Chart.Name -}}
{{- $appVersion = get . "appVersion" -}}
{{- if and (not $appVersion) (hasKey . "values") -}}
{{- /* From an application chart: this chart's appVersion, via .Subcharts. */ -}}
{{- $sub := dict -}}
{{- if hasKey $ctx "Subcharts" }}{{ $sub = get $ctx.Subcharts $chartName | default dict }}{{ end -}}
{{- if $sub }}{{ $appVersion = $sub.Chart.AppVersion }}{{ end -}}
{{- end -}}
{{- $appVersion = $appVersion | default $ctx.Chart.AppVersion -}}
{{- else -}}
{{- $values = .Values -}}
{{- $chartName = .Chart.Name -}}
{{- $appVersion = .Chart.AppVersion -}}
{{- end -}}
{{- $chart := dict "Name" $chartName "AppVersion" (toString $appVersion) "Version" "" -}}
{{- $release := dict "Name" $ctx.Release.Name "Namespace" $ctx.Release.Namespace "Service" $ctx.Release.Service -}}
{{- dict "Chart" $chart "Release" $release "Values" $values | toJson -}}
{{- end -}}

{{/* Internal: parse the scope, failing loudly rather than rendering a broken sidecar. */}}
{{- define "redlock-agent.sidecar.parse" -}}
{{- $s := include "redlock-agent.sidecar.scope" . | fromJson -}}
{{- if hasKey $s "Error" -}}
{{- fail (printf "redlock-agent sidecar: bad argument: %s" $s.Error) -}}
{{- end -}}
{{- if not (and (hasKey $s.Values "sidecar") (hasKey $s.Values "config")) -}}
{{- fail "redlock-agent sidecar: the values passed have no sidecar/config blocks; pass the redlock-agent dependency's values as \"values\"" -}}
{{- end -}}
{{- toJson $s -}}
{{- end -}}

{{/* The path of the agent's socket, as the application sees it. */}}
{{- define "redlock-agent.sidecar.socketPath" -}}
{{- $s := include "redlock-agent.sidecar.parse" . | fromJson -}}
{{- printf "%s/%s" $s.Values.config.socket.dir $s.Values.config.socket.name -}}
{{- end -}}

{{/* The path of the admin socket, inside the agent container only. */}}
{{- define "redlock-agent.sidecar.adminSocketPath" -}}
{{- $s := include "redlock-agent.sidecar.parse" . | fromJson -}}
{{- printf "%s/%s" $s.Values.config.admin.socket.dir $s.Values.config.admin.socket.name -}}
{{- end -}}

{{/* Non-empty when the agent runs once per node (mode "node"), not in the application's pod. */}}
{{- define "redlock-agent.sidecar.nodeMode" -}}
{{- $s := include "redlock-agent.sidecar.parse" . | fromJson -}}
{{- if eq (dig "mode" "sidecar" $s.Values) "node" }}true{{ end -}}
{{- end -}}

{{/* Non-empty when the agent runs as a native sidecar (an initContainer); never in node mode. */}}
{{- define "redlock-agent.sidecar.native" -}}
{{- $s := include "redlock-agent.sidecar.parse" . | fromJson -}}
{{- if and $s.Values.sidecar.native (not (include "redlock-agent.sidecar.nodeMode" .)) }}true{{ end -}}
{{- end -}}

{{/* The agent container, as one list item: the sidecar's, or in node mode the DaemonSet's. */}}
{{- define "redlock-agent.sidecar.container" -}}
{{- $s := include "redlock-agent.sidecar.parse" . | fromJson -}}
{{- $v := $s.Values -}}
{{- $sc := $v.sidecar -}}
{{- $native := include "redlock-agent.sidecar.native" . -}}
{{- $c := $v.config -}}
{{- $masters := include "redlock-agent.masterList" $s | fromYamlArray -}}
{{- $withSecrets := false -}}
{{- range $masters }}{{ if .secretName }}{{ $withSecrets = true }}{{ end }}{{ end -}}
{{- if eq (clean $c.admin.socket.dir) (clean $c.socket.dir) -}}
{{- fail "config.admin.socket.dir: must differ from config.socket.dir, which the application container mounts" -}}
{{- end -}}
{{- if hasPrefix (printf "%s/" (clean $c.socket.dir)) (clean $c.admin.socket.dir) -}}
{{- fail "config.admin.socket.dir: must not be inside config.socket.dir, which the application container mounts" -}}
{{- end -}}
- name: redlock-agent
  image: {{ include "redlock-agent.image" (dict "image" $v.image "appVersion" $s.Chart.AppVersion) | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if $native }}
  # A native sidecar: started before the application, stopped after it.
  restartPolicy: Always
  {{- end }}
  args:
    - --config
    - /etc/redlock/config.yaml
  ports:
    - name: redlock-metrics
      containerPort: {{ int $c.metrics.port }}
      protocol: TCP
  {{- $env := list -}}
  {{- /* The pod name as agent.name, in every lock value this agent sets. */ -}}
  {{- $env = append $env (dict "name" "REDLOCK_AGENT_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name"))) -}}
  {{- /* The pod name as k8s.pod.name on the agent's trace spans. */ -}}
  {{- $env = append $env (dict "name" "POD_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name"))) -}}
  {{- /* Where redlock-tui, run in this container, finds the admin socket. */ -}}
  {{- $env = append $env (dict "name" "REDLOCK_ADMIN_SOCKET" "value" (include "redlock-agent.sidecar.adminSocketPath" .)) -}}
  {{- if eq $v.auth.agentDelivery "env" -}}
  {{- range $i, $m := $masters -}}
  {{- if $m.secretName -}}
  {{- $env = append $env (dict "name" (include "redlock-agent.passwordEnv" (add1 $i)) "valueFrom" (dict "secretKeyRef" (dict "name" $m.secretName "key" $m.secretKey))) -}}
  {{- end -}}
  {{- end -}}
  {{- end -}}
  {{- $env = concat $env $sc.extraEnv -}}
  {{- with $env }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $sc.startupProbe }}
  startupProbe:
    httpGet:
      path: /healthz
      port: redlock-metrics
    periodSeconds: {{ .periodSeconds }}
    timeoutSeconds: {{ .timeoutSeconds }}
    failureThreshold: {{ .failureThreshold }}
  {{- end }}
  {{- with $sc.livenessProbe }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: redlock-metrics
    periodSeconds: {{ .periodSeconds }}
    timeoutSeconds: {{ .timeoutSeconds }}
    failureThreshold: {{ .failureThreshold }}
  {{- end }}
  {{- if $sc.readinessProbe.enabled }}
  {{- with $sc.readinessProbe }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: redlock-metrics
    periodSeconds: {{ .periodSeconds }}
    timeoutSeconds: {{ .timeoutSeconds }}
    failureThreshold: {{ .failureThreshold }}
  {{- end }}
  {{- end }}
  {{- with $sc.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    {{- if and (hasKey $sc "runAsUser") (not (kindIs "invalid" (get $sc "runAsUser"))) }}
    runAsUser: {{ int $sc.runAsUser }}
    {{- end }}
    {{- if and (hasKey $sc "runAsGroup") (not (kindIs "invalid" (get $sc "runAsGroup"))) }}
    runAsGroup: {{ int $sc.runAsGroup }}
    {{- end }}
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    privileged: false
    capabilities:
      drop:
        - ALL
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: redlock-socket
      mountPath: {{ $c.socket.dir }}
    # The admin socket: mounted here and nowhere else.
    - name: redlock-admin
      mountPath: {{ $c.admin.socket.dir }}
    - name: redlock-config
      mountPath: /etc/redlock
      readOnly: true
    {{- if and $withSecrets (eq $v.auth.agentDelivery "file") }}
    - name: redlock-secrets
      mountPath: /var/run/secrets/redlock
      readOnly: true
    {{- end }}
{{- end -}}

{{/* The agent container for `initContainers:` (native sidecar), else nothing. */}}
{{- define "redlock-agent.sidecar.initContainers" -}}
{{- if include "redlock-agent.sidecar.native" . -}}
{{- include "redlock-agent.sidecar.container" . -}}
{{- end -}}
{{- end -}}

{{/* The agent container for `containers:` (classic sidecar), else nothing (native sidecar, node mode). */}}
{{- define "redlock-agent.sidecar.containers" -}}
{{- if not (or (include "redlock-agent.sidecar.native" .) (include "redlock-agent.sidecar.nodeMode" .)) -}}
{{- include "redlock-agent.sidecar.container" . -}}
{{- end -}}
{{- end -}}

{{/*
The pod volumes the sidecar needs, as list items; in node mode, the node's
socket directory alone (the application's pod has no agent).
*/}}
{{- define "redlock-agent.sidecar.volumes" -}}
{{- $s := include "redlock-agent.sidecar.parse" . | fromJson -}}
{{- if include "redlock-agent.sidecar.nodeMode" . -}}
# The node agent's socket directory on the host (it must exist: the node's
# agent makes it).
- name: redlock-socket
  hostPath:
    path: {{ $s.Values.node.socketDir }}
    type: Directory
{{- else -}}
# The agent's socket, shared with the application.
- name: redlock-socket
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{ include "redlock-agent.sidecar.agentVolumes" . }}
{{- end -}}
{{- end -}}

{{/* Internal: the volumes of the agent container but its socket's, as list items. */}}
{{- define "redlock-agent.sidecar.agentVolumes" -}}
{{- $s := include "redlock-agent.sidecar.parse" . | fromJson -}}
{{- $v := $s.Values -}}
{{- $masters := include "redlock-agent.masterList" $s | fromYamlArray -}}
# The admin socket (force release); only the agent container mounts it.
- name: redlock-admin
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
- name: redlock-config
  configMap:
    name: {{ include "redlock-agent.configMapName" $s }}
{{- if eq $v.auth.agentDelivery "file" }}
{{- $sources := list -}}
{{- range $masters -}}
{{- if .secretName -}}
{{- $sources = append $sources (dict "secret" (dict "name" .secretName "items" (list (dict "key" .secretKey "path" .name)))) -}}
{{- end -}}
{{- end -}}
{{- with $sources }}
# One file per master, named after it: the config's password_file.
- name: redlock-secrets
  projected:
    defaultMode: 292 # 0444: only the agent container mounts this volume
    sources:
      {{- toYaml . | nindent 6 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The application container's mount of the socket directory, as a list item. */}}
{{- define "redlock-agent.sidecar.socketVolumeMount" -}}
{{- $s := include "redlock-agent.sidecar.parse" . | fromJson -}}
- name: redlock-socket
  mountPath: {{ $s.Values.config.socket.dir }}
  # Connecting to a Unix socket works on a read-only mount.
  readOnly: true
{{- end -}}

{{/* REDLOCK_SOCKET for the application container, as a list item. */}}
{{- define "redlock-agent.sidecar.appEnv" -}}
- name: REDLOCK_SOCKET
  value: {{ include "redlock-agent.sidecar.socketPath" . | quote }}
{{- end -}}

{{/* Pod labels: the PodMonitor selects pods that carry the sidecar by this label. */}}
{{- define "redlock-agent.sidecar.podLabels" -}}
redlock-agent/sidecar: "true"
{{- end -}}

{{/* Pod annotations: roll the pods when the agent's configuration changes. */}}
{{- define "redlock-agent.sidecar.podAnnotations" -}}
{{- $s := include "redlock-agent.sidecar.parse" . | fromJson -}}
checksum/redlock-config: {{ include "redlock-agent.config" $s | sha256sum }}
{{- end -}}
