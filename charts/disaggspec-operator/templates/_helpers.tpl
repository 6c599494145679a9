{{/* The release's full name (also the ServiceAccount, ClusterRole and Service prefix). */}}
{{- define "disaggspec.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "disaggspec.serviceAccountName" -}}
{{- default (include "disaggspec.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The ClusterRole of everything inside a watched namespace (bound per namespace, or cluster-wide). */}}
{{- define "disaggspec.workloadsRole" -}}
{{- printf "%s-workloads" (include "disaggspec.fullname" .) -}}
{{- end -}}

{{- define "disaggspec.webhookService" -}}
{{- printf "%s-webhook" (include "disaggspec.fullname" .) -}}
{{- end -}}

{{- define "disaggspec.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "disaggspec.labels" -}}
{{ include "disaggspec.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
