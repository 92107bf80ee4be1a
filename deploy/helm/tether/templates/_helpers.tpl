{{/* The chart's name. */}}
{{- define "tether.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the prefix of every object. */}}
{{- define "tether.fullname" -}}
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

{{- define "tether.headlessName" -}}
{{- printf "%s-headless" (include "tether.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tether.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "tether.labels" -}}
helm.sh/chart: {{ include "tether.chart" . }}
{{ include "tether.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The labels that select the pods (never change them on an installed release). */}}
{{- define "tether.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tether.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tether.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tether.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "tether.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Host names the API answers besides loopback: the Services' DNS names and config.allowedHosts. */}}
{{- define "tether.allowedHosts" -}}
{{- $full := include "tether.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $full (printf "%s.%s" $full $ns) (printf "%s.%s.svc" $full $ns) (printf "%s.%s.svc.cluster.local" $full $ns) -}}
{{- $hosts | concat .Values.config.allowedHosts | uniq | toJson -}}
{{- end -}}

{{/* Checks on the values that a template alone cannot express. */}}
{{- define "tether.validate" -}}
{{- if not .Values.token.existingSecret -}}
{{- fail "token.existingSecret: name the Secret that holds the API token (one token for every node)" -}}
{{- end -}}
{{- if not .Values.database.existingSecret -}}
{{- fail "database.existingSecret: name the Secret that holds the PostgreSQL URL (a cluster needs one database)" -}}
{{- end -}}
{{- if not .Values.shared.existingClaim -}}
{{- fail "shared.existingClaim: name the ReadWriteMany PersistentVolumeClaim every node shares" -}}
{{- end -}}
{{- if and .Values.serviceMonitor.enabled (not .Values.metrics.enabled) -}}
{{- fail "serviceMonitor.enabled needs metrics.enabled" -}}
{{- end -}}
{{- if and .Values.pdb.enabled (not (or (kindIs "invalid" .Values.pdb.minAvailable) (kindIs "invalid" .Values.pdb.maxUnavailable))) -}}
{{- fail "pdb: set minAvailable or maxUnavailable, not both" -}}
{{- end -}}
{{- if and .Values.pdb.enabled (kindIs "invalid" .Values.pdb.minAvailable) (kindIs "invalid" .Values.pdb.maxUnavailable) -}}
{{- fail "pdb: set minAvailable or maxUnavailable" -}}
{{- end -}}
{{- end -}}
