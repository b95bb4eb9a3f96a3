{{/* Names. */}}
{{- define "shardstream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "shardstream.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "shardstream.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Service of the Ray head (GCS), which the decode workers join. */}}
{{- define "shardstream.rayHeadService" -}}
{{- printf "%s-ray-head" (include "shardstream.fullname" .) }}
{{- end }}

{{- define "shardstream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "shardstream.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "shardstream.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Labels. Call with (dict "ctx" $ "component" "head"). */}}
{{- define "shardstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shardstream.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{- define "shardstream.labels" -}}
helm.sh/chart: {{ include "shardstream.chart" .ctx }}
{{ include "shardstream.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: shardstream
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end }}

{{/* A word as a POSIX shell word: bare when safe, else single-quoted. */}}
{{- define "shardstream.shellQuote" -}}
{{- $s := toString . }}
{{- if regexMatch "^[A-Za-z0-9_./:@%+=,-]+$" $s }}
{{- $s }}
{{- else }}
{{- printf "'%s'" ($s | replace "'" "'\\''") }}
{{- end }}
{{- end }}

{{/* `ray start` flags from a dict: {flag: true} -> --flag, {flag: value} -> --flag=value; sorted. */}}
{{- define "shardstream.rayFlags" -}}
{{- $params := . }}
{{- range $key := keys $params | sortAlpha }}
{{- $value := index $params $key }}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $value = int64 $value }}
{{- end }}
{{- if kindIs "bool" $value }}
{{- if $value }} --{{ $key }}{{ end }}
{{- else if not (kindIs "invalid" $value) }} --{{ $key }}={{ include "shardstream.shellQuote" $value }}
{{- end }}
{{- end }}
{{- end }}

{{/* Flags the head's `ray start` gets, the user's head.rayStartParams over the chart's. */}}
{{- define "shardstream.headRayParams" -}}
{{- $ray := .Values.ray }}
{{- $params := dict
  "port" ($ray.gcsPort | int)
  "num-cpus" 0
  "disable-usage-stats" true
  "include-dashboard" "false"
  "node-manager-port" ($ray.nodeManagerPort | int)
  "ray-client-server-port" ($ray.clientServerPort | int)
  "temp-dir" $ray.tempDir }}
{{- if $ray.objectStoreMemory }}
{{- $_ := set $params "object-store-memory" ($ray.objectStoreMemory | int64) }}
{{- end }}
{{- toJson (merge (deepCopy .Values.head.rayStartParams) $params) }}
{{- end }}

{{/* `decode` units of one decode worker: floor(decode.cpus / config.decoder_cpus). */}}
{{- define "shardstream.decodeUnits" -}}
{{- $units := floor (divf .Values.decode.cpus .Values.config.decoder_cpus) | int }}
{{- if lt $units 1 }}
{{- fail (printf "decode.cpus (%v) must be at least config.decoder_cpus (%v)" .Values.decode.cpus .Values.config.decoder_cpus) }}
{{- end }}
{{- $units }}
{{- end }}

{{/* How many data ports from decode.dataPort a decode worker's actors may take: four per actor
(its gRPC port and its bulk port, each with a spare). */}}
{{- define "shardstream.dataPorts" -}}
{{- mul 4 (include "shardstream.decodeUnits" . | int) }}
{{- end }}

{{/* Flags a decode worker's `ray start` gets, the user's decode.rayStartParams over the chart's. */}}
{{- define "shardstream.decodeRayParams" -}}
{{- $ray := .Values.ray }}
{{- $params := dict
  "address" (printf "%s:%d" (include "shardstream.rayHeadService" .) ($ray.gcsPort | int))
  "num-cpus" (.Values.decode.cpus | int)
  "resources" (printf "{\"decode\": %s}" (include "shardstream.decodeUnits" .))
  "node-manager-port" ($ray.nodeManagerPort | int)
  "temp-dir" $ray.tempDir
  "block" true }}
{{- if $ray.objectStoreMemory }}
{{- $_ := set $params "object-store-memory" ($ray.objectStoreMemory | int64) }}
{{- end }}
{{- toJson (merge (deepCopy .Values.decode.rayStartParams) $params) }}
{{- end }}

{{/* The ConfigMap's value for one ServiceConfig field: "" for null, lists comma-joined. */}}
{{- define "shardstream.configValue" -}}
{{- if kindIs "invalid" . }}
{{- else if kindIs "slice" . }}
{{- join "," . }}
{{- else if kindIs "string" . }}
{{- . }}
{{- else }}
{{- toJson . }}
{{- end }}
{{- end }}

{{/* Environment both workloads share. */}}
{{- define "shardstream.env" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: RAY_USAGE_STATS_ENABLED
  value: "0"
{{- if .Values.ray.auth.existingSecret }}
- name: RAY_AUTH_MODE
  value: token
- name: RAY_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.ray.auth.existingSecret }}
      key: {{ .Values.ray.auth.key }}
{{- else }}
- name: RAY_AUTH_MODE
  value: disabled
{{- end }}
{{- if .Values.gcp.credentialsSecret }}
- name: GOOGLE_APPLICATION_CREDENTIALS
  value: /var/run/secrets/shardstream/gcp/{{ .Values.gcp.credentialsKey }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volume mounts both workloads share. */}}
{{- define "shardstream.volumeMounts" -}}
- name: dshm
  mountPath: /dev/shm
- name: tmp
  mountPath: /tmp
- name: ray-tmp
  mountPath: {{ .Values.ray.tempDir }}
{{- if .Values.gcp.credentialsSecret }}
- name: gcp-credentials
  mountPath: /var/run/secrets/shardstream/gcp
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volumes both workloads share. */}}
{{- define "shardstream.volumes" -}}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.shm.sizeLimit }}
- name: tmp
  emptyDir:
    {{- with .Values.tmp.sizeLimit }}
    sizeLimit: {{ . }}
    {{- else }} {}
    {{- end }}
- name: ray-tmp
  emptyDir:
    {{- with .Values.ray.tempDirSizeLimit }}
    sizeLimit: {{ . }}
    {{- else }} {}
    {{- end }}
{{- if .Values.gcp.credentialsSecret }}
- name: gcp-credentials
  secret:
    secretName: {{ .Values.gcp.credentialsSecret }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Pod-level fields both workloads share. */}}
{{- define "shardstream.podCommon" -}}
serviceAccountName: {{ include "shardstream.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* "true" when decode workers need the TLS Secret: their batch servers speak TLS too. */}}
{{- define "shardstream.decodeTls" -}}
{{- if .Values.tls.secretName }}true{{ end }}
{{- end }}

{{/* Where the head and each decode worker mount the TLS Secret. */}}
{{- define "shardstream.tlsDir" -}}
/var/run/secrets/shardstream/tls
{{- end }}

{{/* Where the head mounts the tokens file's Secret (auth.secretName), the whole Secret so that the
kubelet's updates reach it (a subPath mount would never change). */}}
{{- define "shardstream.authDir" -}}
/var/run/secrets/shardstream/auth
{{- end }}

{{/* The decode workers' mount of their local copy (decode.localCopy), the service's local_copy_dir. */}}
{{- define "shardstream.localCopyDir" -}}
{{- $dir := .Values.decode.localCopy.mountPath | trimSuffix "/" }}
{{- if has $dir (list "/tmp" "/dev/shm" (.Values.ray.tempDir | trimSuffix "/")) }}
{{- fail (printf "decode.localCopy.mountPath (%s) must not be /tmp, /dev/shm or ray.tempDir: the chart mounts other volumes there" $dir) }}
{{- end }}
{{- $dir }}
{{- end }}

{{/* With decode.autoscaling.metrics.decodersWanted the HPA holds the workers whose `decode` units
carry the decode actors the service's scaling policy wants, so the policy's bounds
(config.autoscale_min_decoders, config.autoscale_max_decoders) must be the HPA's (minReplicas,
maxReplicas) in decode units: replicas = ceil(decoders / units per worker). Fails otherwise. */}}
{{- define "shardstream.checkDecodersWanted" -}}
{{- $as := .Values.decode.autoscaling }}
{{- $config := .Values.config }}
{{- $m := $as.metrics }}
{{- $key := "decode.autoscaling.metrics.decodersWanted" }}
{{- if or $m.cpu.enabled $m.dataStall.enabled $m.queueDepth.enabled }}
{{- fail (printf "%s is the decode workers' count itself: turn decode.autoscaling.metrics.{cpu,dataStall,queueDepth} off with it (the HPA takes the largest count any metric asks for, so another metric would add workers the service leaves idle)" $key) }}
{{- end }}
{{- if not .Values.metrics.enabled }}
{{- fail (printf "%s needs metrics.enabled: the HPA reads shardstream_decoders_wanted from the head's /metrics" $key) }}
{{- end }}
{{- if not (kindIs "invalid" $config.num_decoders) }}
{{- fail (printf "%s needs config.num_decoders unset (it is %v): a fixed pool has nothing to scale" $key $config.num_decoders) }}
{{- end }}
{{- $units := include "shardstream.decodeUnits" . | int }}
{{- $maxReplicas := $as.maxReplicas | int }}
{{- $minReplicas := $as.minReplicas | int }}
{{- if kindIs "invalid" $config.autoscale_max_decoders }}
{{- fail (printf "%s needs config.autoscale_max_decoders (the service's scaling policy is off without it): set it to %d, decode.autoscaling.maxReplicas (%d) x %d decode units per worker" $key (mul $maxReplicas $units) $maxReplicas $units) }}
{{- end }}
{{- $max := $config.autoscale_max_decoders | int }}
{{- $min := $config.autoscale_min_decoders | int }}
{{- $maxWorkers := ceil (divf $max $units) | int }}
{{- if ne $maxWorkers $maxReplicas }}
{{- fail (printf "%s: decode.autoscaling.maxReplicas (%d) must be the decode workers that hold config.autoscale_max_decoders (%d), ceil(%d / %d decode units per worker) = %d; or set config.autoscale_max_decoders to %d, maxReplicas x units" $key $maxReplicas $max $max $units $maxWorkers (mul $maxReplicas $units)) }}
{{- end }}
{{- $minWorkers := ceil (divf $min $units) | int }}
{{- if ne $minWorkers $minReplicas }}
{{- fail (printf "%s: decode.autoscaling.minReplicas (%d) must be the decode workers that hold config.autoscale_min_decoders (%d), ceil(%d / %d decode units per worker) = %d" $key $minReplicas $min $min $units $minWorkers) }}
{{- end }}
{{- end }}

{{/* The shortest scale-down stabilization window the decode HPA may have with decodersWanted:
twice the scaling policy's window (config.autoscale_window_s), seconds. */}}
{{- define "shardstream.scaleDownWindowFloor" -}}
{{- $least := ceil (mulf 2 .Values.config.autoscale_window_s) | int }}
{{- if gt $least 3600 }}
{{- fail (printf "config.autoscale_window_s (%v) is too long for decode.autoscaling.metrics.decodersWanted: the HPA's scale-down window must be twice it, and Kubernetes allows at most 3600 s" .Values.config.autoscale_window_s) }}
{{- end }}
{{- $least }}
{{- end }}
