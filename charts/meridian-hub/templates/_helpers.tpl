{{/* Chart name, truncated to a DNS label. */}}
{{- define "meridian-hub.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "meridian-hub.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "meridian-hub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meridian-hub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "meridian-hub.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "meridian-hub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: hub
{{- end }}

{{/* "true" when etcd or NATS runs embedded: one replica, a StatefulSet on a PVC. */}}
{{- define "meridian-hub.embedded" -}}
{{- if or (not .Values.etcd.endpoints) (not .Values.nats.url) }}true{{ end }}
{{- end }}

{{/* Checks the schema cannot express; each names its field. */}}
{{- define "meridian-hub.validate" -}}
{{- if and (include "meridian-hub.embedded" .) (gt (int .Values.replicaCount) 1) }}
{{- fail "replicaCount: several replicas need an external etcd and NATS: set etcd.endpoints and nats.url (the embedded stores serve one replica)" }}
{{- end }}
{{- if and (not .Values.api.tls.existingSecret) (not .Values.api.insecurePlaintext) }}
{{- fail "api.tls.existingSecret: the hub refuses to serve beyond loopback without TLS; give a Secret with tls.crt and tls.key, or set api.insecurePlaintext=true behind a proxy that terminates TLS" }}
{{- end }}
{{- if and .Values.api.tls.clientCA (not .Values.api.tls.existingSecret) }}
{{- fail "api.tls.clientCA: mutual TLS needs api.tls.existingSecret" }}
{{- end }}
{{- if and (not .Values.etcd.endpoints) (or .Values.etcd.tls.existingSecret .Values.etcd.auth.existingSecret .Values.etcd.auth.user) }}
{{- fail "etcd.endpoints: etcd.tls and etcd.auth are for an external etcd; the embedded etcd listens on loopback without them" }}
{{- end }}
{{- if .Values.etcd.tls.existingSecret }}
{{- if and (not .Values.etcd.tls.caKey) (not .Values.etcd.tls.clientCert) }}
{{- fail "etcd.tls: the Secret gives nothing to mount: set caKey or clientCert" }}
{{- end }}
{{- range .Values.etcd.endpoints }}
{{- if not (hasPrefix "https://" .) }}
{{- fail (printf "etcd.endpoints: %s: with etcd.tls every endpoint must be https://" .) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.etcd.auth.user (not .Values.etcd.auth.existingSecret) }}
{{- fail "etcd.auth.existingSecret: etcd.auth.user needs its password from a Secret" }}
{{- end }}
{{- if and .Values.etcd.auth.existingSecret (not .Values.etcd.auth.user) }}
{{- fail "etcd.auth.user: required with etcd.auth.existingSecret" }}
{{- end }}
{{- if and (not .Values.nats.url) (or .Values.nats.auth.existingSecret .Values.nats.tls.existingSecret) }}
{{- fail "nats.url: nats.auth and nats.tls are for an external NATS; the embedded NATS listens on loopback without credentials" }}
{{- end }}
{{- if and .Values.nats.auth.user (ne .Values.nats.auth.type "password") }}
{{- fail "nats.auth.user: only for nats.auth.type=password" }}
{{- end }}
{{- if and (eq .Values.nats.auth.type "password") .Values.nats.auth.existingSecret (not .Values.nats.auth.user) }}
{{- fail "nats.auth.user: required with nats.auth.type=password" }}
{{- end }}
{{- if and .Values.nats.tls.clientCert (not .Values.nats.tls.existingSecret) }}
{{- fail "nats.tls.clientCert: needs nats.tls.existingSecret" }}
{{- end }}
{{- if and .Values.nats.tls.existingSecret (not .Values.nats.tls.caKey) (not .Values.nats.tls.clientCert) }}
{{- fail "nats.tls: the Secret gives nothing to mount: set caKey or clientCert" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.serviceMonitor.tokenSecret.name) }}
{{- fail "metrics.serviceMonitor.tokenSecret.name: /metrics needs an authenticated caller: give a Secret with an API token" }}
{{- end }}
{{- if and .Values.ingress.enabled (not .Values.ingress.host) }}
{{- fail "ingress.host: required with ingress.enabled" }}
{{- end }}
{{- end }}

{{/* Key of the NATS credential in its Secret. */}}
{{- define "meridian-hub.natsAuthKey" -}}
{{- $a := .Values.nats.auth }}
{{- if $a.key }}{{ $a.key }}
{{- else }}{{ get (dict "creds" "nats.creds" "nkey" "nkey.seed" "token" "token" "password" "password") $a.type }}
{{- end }}
{{- end }}

{{/* The API's URL scheme for probes and clients. */}}
{{- define "meridian-hub.scheme" -}}
{{- if .Values.api.tls.existingSecret }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}
