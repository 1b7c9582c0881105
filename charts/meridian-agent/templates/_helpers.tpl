{{/* Chart name, truncated to a DNS label. */}}
{{- define "meridian-agent.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "meridian-agent.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Name of cluster-scoped objects: unique per release namespace too. */}}
{{- define "meridian-agent.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "meridian-agent.fullname" .) }}
{{- end }}

{{- define "meridian-agent.serviceAccountName" -}}
{{- default (include "meridian-agent.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* Namespace the Jobs are created in: connector.namespace or the release's. */}}
{{- define "meridian-agent.jobsNamespace" -}}
{{- default .Release.Namespace .Values.connector.namespace }}
{{- end }}

{{- define "meridian-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meridian-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "meridian-agent.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "meridian-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: spoke-agent
meridian.io/cluster-id: {{ .Values.clusterID | quote }}
{{- end }}

{{/* True when the chart creates the credentials Secret itself. */}}
{{- define "meridian-agent.inlineCreds" -}}
{{- with .Values.hub.credentials }}{{ if or .user .password .token }}true{{ end }}{{ end }}
{{- end }}

{{/* Name of the Secret that holds the NATS URL, if any. */}}
{{- define "meridian-agent.credsSecret" -}}
{{- if .Values.hub.credentials.existingSecret }}
{{- .Values.hub.credentials.existingSecret }}
{{- else if include "meridian-agent.inlineCreds" . }}
{{- printf "%s-nats" (include "meridian-agent.fullname" .) }}
{{- end }}
{{- end }}

{{/* Key in that Secret. */}}
{{- define "meridian-agent.credsKey" -}}
{{- if .Values.hub.credentials.existingSecret }}
{{- .Values.hub.credentials.existingSecretKey }}
{{- else }}nats-url{{ end }}
{{- end }}

{{/* The NATS URL with inline credentials: scheme://userinfo@rest. */}}
{{- define "meridian-agent.credsURL" -}}
{{- $c := .Values.hub.credentials }}
{{- $parts := splitn "://" 2 .Values.hub.natsURL }}
{{- $userinfo := "" }}
{{- if $c.token }}
{{- $userinfo = urlquery $c.token }}
{{- else }}
{{- $userinfo = printf "%s:%s" (urlquery $c.user) (urlquery $c.password) }}
{{- end }}
{{- printf "%s://%s@%s" $parts._0 $userinfo $parts._1 }}
{{- end }}

{{/* Key in hub.auth.existingSecret: hub.auth.key or the type's default. */}}
{{- define "meridian-agent.authKey" -}}
{{- $a := .Values.hub.auth }}
{{- $defaults := dict "creds" "nats.creds" "nkey" "nkey.seed" "token" "token" "password" "password" }}
{{- default (get $defaults $a.type) $a.key }}
{{- end }}

{{/* The agent flag that reads the hub.auth file. */}}
{{- define "meridian-agent.authFlag" -}}
{{- get (dict "creds" "--nats-creds" "nkey" "--nats-nkey" "token" "--nats-token-file" "password" "--nats-password-file") .Values.hub.auth.type }}
{{- end }}

{{/*
Checks the schema cannot express (values.schema.json checks the rest).
Each message names the value.
*/}}
{{- define "meridian-agent.validate" -}}
{{- $c := .Values.hub.credentials }}
{{- if and $c.existingSecret (include "meridian-agent.inlineCreds" .) }}
{{- fail "hub.credentials: give existingSecret or user/password/token, not both" }}
{{- end }}
{{- if and $c.token (or $c.user $c.password) }}
{{- fail "hub.credentials.token: give a token or user/password, not both" }}
{{- end }}
{{- if and (or $c.user $c.password) (not (and $c.user $c.password)) }}
{{- fail "hub.credentials.user and hub.credentials.password: give both or neither" }}
{{- end }}
{{- if and (not $c.existingSecret) (not .Values.hub.natsURL) }}
{{- fail "hub.natsURL: required (or hub.credentials.existingSecret holding the whole URL)" }}
{{- end }}
{{- $auth := .Values.hub.auth }}
{{- if and $auth.existingSecret (include "meridian-agent.inlineCreds" .) }}
{{- fail "hub.auth.existingSecret: give hub.auth or inline hub.credentials.user/password/token, not both" }}
{{- end }}
{{- if and $auth.existingSecret (contains "@" .Values.hub.natsURL) }}
{{- fail "hub.natsURL: already carries credentials (user@host); do not also set hub.auth.existingSecret" }}
{{- end }}
{{- if and $auth.existingSecret (eq $auth.type "password") (not $auth.user) }}
{{- fail "hub.auth.user: required with hub.auth.type password" }}
{{- end }}
{{- if and $auth.user (ne $auth.type "password") }}
{{- fail "hub.auth.user: only used with hub.auth.type password" }}
{{- end }}
{{- $tls := .Values.hub.tls }}
{{- if and $tls.existingSecret (not $tls.caKey) (not $tls.clientCert) }}
{{- fail "hub.tls: with existingSecret set caKey, clientCert or both (nothing to mount)" }}
{{- end }}
{{- if and (not $tls.existingSecret) $tls.clientCert }}
{{- fail "hub.tls.clientCert: needs hub.tls.existingSecret holding the certificate and key" }}
{{- end }}
{{- $v := .Values.vault }}
{{- if $v.address }}
{{- if not $v.role }}
{{- fail "vault.role: required with vault.address (the Vault Kubernetes auth role of this service account)" }}
{{- end }}
{{- if and (not $v.natsCredsPath) (not $v.pkiRole) }}
{{- fail "vault.address: set vault.natsCredsPath, vault.pkiRole or both (nothing would come from Vault)" }}
{{- end }}
{{- if and $v.natsCredsPath (or $auth.existingSecret (include "meridian-agent.inlineCreds" .) .Values.hub.credentials.existingSecret) }}
{{- fail "vault.natsCredsPath: the NATS credential comes from Vault; do not also set hub.auth or hub.credentials" }}
{{- end }}
{{- if and $v.pkiRole $tls.clientCert }}
{{- fail "vault.pkiRole: the NATS client certificate comes from Vault; do not also set hub.tls.clientCert" }}
{{- end }}
{{- else }}
{{- range $k := list "role" "natsCredsPath" "pkiRole" "caSecret" }}
{{- if index $v $k }}
{{- fail (printf "vault.%s: needs vault.address" $k) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (include "meridian-agent.inlineCreds" .) (contains "@" .Values.hub.natsURL) }}
{{- fail "hub.natsURL: already carries credentials (user@host); do not also set hub.credentials.user/password/token" }}
{{- end }}
{{- end }}
