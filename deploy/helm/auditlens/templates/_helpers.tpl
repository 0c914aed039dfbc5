{{/* fullname: fullnameOverride, else the release's name when it holds the chart's name (or
nameOverride), else "<release>-<name>"; at most 63 characters. */}}
{{- define "auditlens.fullname" -}}
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
{{- end }}

{{/* The name of one of the release's objects, from its name in deploy/kubernetes: that name
itself when the fullname is "auditlens" (the default release keeps the names an install already
has, and kustomize's), else prefixed with the fullname ("auditlens" and "auditlens-*" take the
fullname in place of "auditlens"), so that two releases never share an object. list $ NAME */}}
{{- define "auditlens.obj" -}}
{{- $full := include "auditlens.fullname" (index . 0) -}}
{{- $n := index . 1 -}}
{{- if eq $full "auditlens" -}}
{{- $n -}}
{{- else if eq $n "auditlens" -}}
{{- $full -}}
{{- else -}}
{{- printf "%s-%s" $full (trimPrefix "auditlens-" $n) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end }}

{{/* The selector of one workload's pods: its app name and the release. list $ APP */}}
{{- define "auditlens.selector" -}}
{app.kubernetes.io/name: {{ index . 1 }}, app.kubernetes.io/instance: {{ (index . 0).Release.Name }}}
{{- end }}

{{/* The labels of one workload's pods. list $ APP COMPONENT */}}
{{- define "auditlens.podLabels" -}}
{app.kubernetes.io/name: {{ index . 1 }}, app.kubernetes.io/component: {{ index . 2 }}, app.kubernetes.io/part-of: auditlens, app.kubernetes.io/instance: {{ (index . 0).Release.Name }}}
{{- end }}

{{/* The privileged namespace of the file ingest: ingest.file.namespace, else the release's
"auditlens-ingest". */}}
{{- define "auditlens.ingestNamespace" -}}
{{- .Values.ingest.file.namespace | default (include "auditlens.obj" (list . "auditlens-ingest")) -}}
{{- end }}

{{/* The node directory of the file ingest's read positions: ingest.file.checkpointDir, else
/var/lib/auditlens/checkpoints for the default release and /var/lib/auditlens/<fullname>/checkpoints
for another (two releases on one node never share a position file). */}}
{{- define "auditlens.checkpointDir" -}}
{{- $full := include "auditlens.fullname" . -}}
{{- .Values.ingest.file.checkpointDir | default (ternary "/var/lib/auditlens/checkpoints" (printf "/var/lib/auditlens/%s/checkpoints" $full) (eq $full "auditlens")) -}}
{{- end }}

{{/* Labels of every object: the same part-of label as deploy/kubernetes, and Helm's own. */}}
{{- define "auditlens.labels" -}}
app.kubernetes.io/part-of: auditlens
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The cluster's name: required, no default. */}}
{{- define "auditlens.cluster" -}}
{{- required "set .Values.cluster.name: this cluster's name, as findings, the console and the weekly mail show it (--set cluster.name=prod-eu-1)" .Values.cluster.name -}}
{{- end }}

{{/* image NAME: the fully qualified reference of an auditlens image. */}}
{{- define "auditlens.image" -}}
image: {{ printf "%s/%s:%s" .root.Values.image.registry .name (.root.Values.image.tag | default .root.Chart.AppVersion) | quote }}
{{- with .root.Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/* The pod securityContext of every non-root workload. */}}
{{- define "auditlens.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* The container securityContext of every container. */}}
{{- define "auditlens.containerSecurityContext" -}}
securityContext:
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  capabilities: {drop: [ALL]}
{{- end }}

{{/* env of an ingest: its node's name and the Go soft memory limit. */}}
{{- define "auditlens.ingestEnv" -}}
env:
  - name: AUDITLENS_NODE_NAME
    valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
  - name: GOMEMLIMIT
    valueFrom: {resourceFieldRef: {resource: limits.memory}}
envFrom:
  - configMapRef: {name: {{ include "auditlens.obj" (list . "auditlens") }}}
{{- end }}

{{/* Probes on the metrics port; startup failureThreshold as the argument. */}}
{{- define "auditlens.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 2
  failureThreshold: {{ . }}
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
  periodSeconds: 10
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 20
  failureThreshold: 3
{{- end }}

{{/* A PodDisruptionBudget: one pod down at a time. dict "root" . "name" N "namespace" NS "app" LABEL */}}
{{- define "auditlens.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "auditlens.obj" (list .root .name) }}
  namespace: {{ .namespace }}
  labels:
    {{- include "auditlens.labels" .root | nindent 4 }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels: {{ include "auditlens.selector" (list .root .app) }}
{{- end }}

{{/* A ServiceAccount without a mounted token. dict "root" . "name" N "namespace" NS */}}
{{- define "auditlens.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "auditlens.obj" (list .root .name) }}
  namespace: {{ .namespace }}
  labels:
    {{- include "auditlens.labels" .root | nindent 4 }}
  {{- with .annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
automountServiceAccountToken: false
{{- end }}

{{/* The Secret that holds AUDITLENS_CLICKHOUSE_DSN (it may carry the password): the user's own,
or the chart's auditlens-clickhouse made from config.clickhouse.dsn. */}}
{{- define "auditlens.clickhouseSecret" -}}
{{- .Values.config.clickhouse.existingSecret | default (include "auditlens.obj" (list . "auditlens-clickhouse")) }}
{{- end }}

{{/* The shared settings, as the ConfigMap "auditlens" holds them (not the ClickHouse DSN: a
Secret, auditlens.clickhouseSecret). */}}
{{- define "auditlens.config" -}}
AUDITLENS_CLUSTER: {{ include "auditlens.cluster" . | quote }}
{{- if .Values.config.kafka.brokers }}
AUDITLENS_KAFKA_BROKERS: {{ .Values.config.kafka.brokers | quote }}
{{- else }}
AUDITLENS_NATS_URL: {{ .Values.config.nats.url | quote }}
{{- if gt (int .Values.config.nats.replicas) 1 }}
AUDITLENS_NATS_REPLICAS: {{ .Values.config.nats.replicas | toString | quote }}
{{- end }}
{{- end }}
{{- with .Values.config.clickhouse.cluster }}
AUDITLENS_CLICKHOUSE_CLUSTER: {{ . | quote }}
{{- end }}
{{- with .Values.config.report.batchMaxWait }}
AUDITLENS_REPORT_BATCH_MAX_WAIT: {{ . | quote }}
{{- end }}
AUDITLENS_RETENTION_DAYS: {{ .Values.config.report.retentionDays | int | toString | quote }}
AUDITLENS_COUNTS_RETENTION_DAYS: {{ .Values.config.report.countsRetentionDays | int | toString | quote }}
AUDITLENS_LOG_FORMAT: {{ .Values.config.logFormat | quote }}
AUDITLENS_METRICS_ADDR: {{ .Values.config.metricsAddr | quote }}
{{- end }}

{{/* The NetworkPolicies every namespace with auditlens pods gets: deny by default, DNS and the
bus out, metrics in from the monitoring namespace only. The namespace as the argument. */}}
{{- define "auditlens.networkPolicies" -}}
{{- $ns := .namespace }}
{{- $v := .root.Values }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "auditlens.obj" (list .root "default-deny") }}
  namespace: {{ $ns }}
  labels:
    {{- include "auditlens.labels" .root | nindent 4 }}
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "auditlens.obj" (list .root "allow-dns") }}
  namespace: {{ $ns }}
  labels:
    {{- include "auditlens.labels" .root | nindent 4 }}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
    - to:
        - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: {{ $v.networkPolicy.dns.namespace }}}}
          podSelector: {matchLabels: {{ toJson $v.networkPolicy.dns.podLabels }}}
      ports:
        - {protocol: UDP, port: {{ $v.networkPolicy.dns.port }}}
        - {protocol: TCP, port: {{ $v.networkPolicy.dns.port }}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "auditlens.obj" (list .root "allow-bus") }}
  namespace: {{ $ns }}
  labels:
    {{- include "auditlens.labels" .root | nindent 4 }}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
    - to:
        {{- if $v.config.kafka.brokers }}
        - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: {{ $v.networkPolicy.kafkaNamespace }}}}
      ports:
        - {protocol: TCP, port: 9092}
        {{- else }}
        - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: {{ $v.networkPolicy.natsNamespace }}}}
      ports:
        - {protocol: TCP, port: 4222}
        {{- end }}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "auditlens.obj" (list .root "allow-metrics") }}
  namespace: {{ $ns }}
  labels:
    {{- include "auditlens.labels" .root | nindent 4 }}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
    - from:
        - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: {{ $v.networkPolicy.monitoringNamespace }}}}
      ports:
        - {protocol: TCP, port: 9090}
{{- end }}

{{/* An ingest Deployment reading one cloud source or serving one endpoint, with its
ServiceAccount and PodDisruptionBudget. dict "root" . "name" N "app" LABEL "replicas" R "args" LIST
"port" (dict "name" P "containerPort" C, optional) "secrets" (LIST of dict "name" V "secret" S "path" M)
"resources" RES "annotations" SA-ANNOTATIONS */}}
{{- define "auditlens.ingestDeployment" -}}
{{ include "auditlens.serviceAccount" (dict "root" .root "name" .name "namespace" .root.Release.Namespace "annotations" .annotations) }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "auditlens.obj" (list .root .name) }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "auditlens.labels" .root | nindent 4 }}
spec:
  replicas: {{ .replicas }}
  selector:
    matchLabels: {{ include "auditlens.selector" (list .root .app) }}
  template:
    metadata:
      labels: {{ include "auditlens.podLabels" (list .root .app "ingest") }}
      annotations:
        checksum/config: {{ include "auditlens.config" .root | sha256sum }}
        {{- with .root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "auditlens.obj" (list .root .name) }}
      automountServiceAccountToken: false
      {{- include "auditlens.podSettings" (dict "root" .root) | nindent 6 }}
      {{- include "auditlens.podSecurityContext" .root | nindent 6 }}
      containers:
        - name: ingest
          {{- include "auditlens.image" (dict "root" .root "name" "ingest") | nindent 10 }}
          args:
            {{- toYaml .args | nindent 12 }}
          {{- include "auditlens.ingestEnv" .root | nindent 10 }}
          ports:
            {{- with .port }}
            - {name: {{ .name }}, containerPort: {{ .containerPort }}}
            {{- end }}
            - {name: metrics, containerPort: 9090}
          {{- include "auditlens.probes" 30 | nindent 10 }}
          resources:
            {{- toYaml .resources | nindent 12 }}
          {{- include "auditlens.containerSecurityContext" .root | nindent 10 }}
          volumeMounts:
            {{- range .secrets }}
            - {name: {{ .name }}, mountPath: {{ .path }}, readOnly: true}
            {{- end }}
            - {name: tmp, mountPath: /tmp}
      volumes:
        {{- range .secrets }}
        - name: {{ .name }}
          secret: {secretName: {{ .secret }}}
        {{- end }}
        - name: tmp
          emptyDir: {sizeLimit: 64Mi}
---
{{ include "auditlens.pdb" (dict "root" .root "name" .name "namespace" .root.Release.Namespace "app" .app) }}
{{- end }}

{{/* The owners and acknowledgements files (values owners, acknowledgements: inline, or an
existing ConfigMap with the key owners.yaml / acknowledgements.yaml): env, mounts, volumes of
report and the weekly CronJob. */}}
{{- define "auditlens.filesEnv" -}}
{{- if or .Values.owners.inline .Values.owners.configMap }}
- {name: AUDITLENS_OWNERS_FILE, value: /etc/auditlens/owners/owners.yaml}
{{- end }}
{{- if or .Values.acknowledgements.inline .Values.acknowledgements.configMap }}
- {name: AUDITLENS_ACKNOWLEDGEMENTS_FILE, value: /etc/auditlens/acknowledgements/acknowledgements.yaml}
{{- end }}
{{- end }}

{{- define "auditlens.filesMounts" -}}
{{- if or .Values.owners.inline .Values.owners.configMap }}
- {name: owners, mountPath: /etc/auditlens/owners, readOnly: true}
{{- end }}
{{- if or .Values.acknowledgements.inline .Values.acknowledgements.configMap }}
- {name: acknowledgements, mountPath: /etc/auditlens/acknowledgements, readOnly: true}
{{- end }}
{{- end }}

{{- define "auditlens.filesVolumes" -}}
{{- if or .Values.owners.inline .Values.owners.configMap }}
- name: owners
  configMap: {name: {{ .Values.owners.configMap | default (include "auditlens.obj" (list . "auditlens-owners")) }}}
{{- end }}
{{- if or .Values.acknowledgements.inline .Values.acknowledgements.configMap }}
- name: acknowledgements
  configMap: {name: {{ .Values.acknowledgements.configMap | default (include "auditlens.obj" (list . "auditlens-acknowledgements")) }}}
{{- end }}
{{- end }}

{{/* The pod settings every workload shares, from .Values: imagePullSecrets, priorityClassName,
nodeSelector, tolerations and affinity; a workload's own nodeSelector, tolerations or affinity
(the ingest DaemonSet's control-plane placement) take precedence. dict "root" $ "own" MAP */}}
{{- define "auditlens.podSettings" -}}
{{- $v := .root.Values }}
{{- $own := .own | default dict }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with ($own.nodeSelector | default $v.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($own.tolerations | default $v.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($own.affinity | default $v.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
