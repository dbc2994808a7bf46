{{/* Names and labels shared by every object. */}}

{{- define "nvmock.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Cluster-scoped objects: the name and the release namespace, joined by
a colon, which neither has (with "-", release a in namespace b-c and
release a-nvmock-b in c met). */}}
{{- define "nvmock.clusterName" -}}
{{- printf "%s:%s" (include "nvmock.fullname" .) .Release.Namespace -}}
{{- end -}}

{{- define "nvmock.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "nvmock.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The built-in profiles (profile/builtin); the chart tests keep
this list, the schema's enum and the library's in step. */}}
{{- define "nvmock.builtinProfiles" -}}
a100 b200 gb200 gb300 h100 l40s t4
{{- end -}}

{{/* The built-in profiles whose nodes have InfiniBand (a test checks it). */}}
{{- define "nvmock.infinibandProfiles" -}}
a100 b200 gb200 h100
{{- end -}}

{{/* "true" when a pool's nodes have InfiniBand: its profile's, or an
infiniband block its overrides give. */}}
{{- define "nvmock.hasInfiniband" -}}
{{- $ib := has .profile (splitList " " (include "nvmock.infinibandProfiles" .)) -}}
{{- if and (not $ib) .overrides (kindIs "map" .overrides) -}}
{{- $ib = not (empty (get .overrides "infiniband")) -}}
{{- end -}}
{{- if $ib }}true{{ end -}}
{{- end -}}

{{/* The profile file of one pool: its base, GPU count and overrides. */}}
{{- define "nvmock.profile" -}}
base: {{ .profile }}
{{- with .gpus }}
gpus: {{ . }}
{{- end }}
{{- with .overrides }}
{{ toYaml . }}
{{- end }}
{{- end -}}
