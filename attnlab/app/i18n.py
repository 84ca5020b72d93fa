"""The interface's words in English, Spanish and Chinese: one catalogue for the explorer and the
widgets, so that a missing translation is a test failure rather than an English word in a
Chinese page (tests/test_i18n.py checks every entry has every language).

Entries are written for each language (short labels a native reader would choose), not rendered
word for word. `{name}` fields are filled by `text(key, lang, name=...)`; keys are named by area
("page.*", "heads.*", "widgets.*") and written out where they are used, so that a test can read
them in the source. The paper's own terms stay as readers know them (Eq. (1), α, log P).

A page's language is `language(?lang=, Accept-Language)`. attnlab's errors are raised in English
deep in the library, where no page is known; `error_message` puts a lead line in the reader's
language (per error class) before the English detail.
"""

from __future__ import annotations

from attnlab.errors import CheckpointError, ConfigError, DataError, ModelInputError, TimeLimitError

LANGUAGES: dict[str, str] = {"en": "English", "es": "Español", "zh": "中文"}
DEFAULT = "en"

# One line per entry, the three languages side by side (not reflowed: easier to compare).
# fmt: off
MESSAGES: dict[str, dict[str, str]] = {
    "language": {"en": "Language", "es": "Idioma", "zh": "语言"},
    # the page: inputs on the left
    "page.title": {"en": "attnlab explorer", "es": "Explorador de attnlab", "zh": "attnlab 注意力可视化"},
    "page.checkpoint": {"en": "Checkpoint", "es": "Modelo", "zh": "模型"},
    "page.open_dir": {"en": "…or open a directory", "es": "…o abre una carpeta", "zh": "…或打开目录"},
    "page.open_dir_hint": {"en": "under {roots}", "es": "dentro de {roots}", "zh": "位于 {roots} 下"},
    "page.open": {"en": "Open", "es": "Abrir", "zh": "打开"},
    "page.model_info": {"en": "task: {task} · {layers} layers · {heads} heads · d_model {d_model} · vocab {vocab}", "es": "tarea: {task} · {layers} capas · {heads} cabezas · d_model {d_model} · vocabulario {vocab}", "zh": "任务：{task} · {layers} 层 · 每层 {heads} 个头 · d_model {d_model} · 词表 {vocab}"},
    "page.source": {"en": "Source text", "es": "Texto de entrada", "zh": "原文"},
    "page.reference": {"en": "Reference (optional; its teacher-forced attention is shown)", "es": "Referencia (opcional; se muestra su atención, leída como salida)", "zh": "参考文本（可选；显示以它做教师强制时的注意力）"},
    "page.decoding": {"en": "decoding", "es": "decodificación", "zh": "解码方式"},
    "page.beam_size": {"en": "beam size", "es": "ancho", "zh": "束宽"},
    "page.beam_help": {"en": "How many hypotheses the beam search keeps (1–{most} here; the paper uses 4).", "es": "Cuántas hipótesis conserva la búsqueda en haz (1–{most} aquí; el artículo usa 4).", "zh": "束搜索保留的假设个数（此处为 1–{most}；论文取 4）。"},
    "page.alpha": {"en": "α", "es": "α", "zh": "α"},
    "page.alpha_help": {"en": "Length penalty α: higher values favour longer outputs (the paper uses 0.6).", "es": "Penalización por longitud α: con valores altos se prefieren salidas más largas (el artículo usa 0.6).", "zh": "长度惩罚 α：值越大越偏向较长的输出（论文取 0.6）。"},
    "page.translate": {"en": "Translate", "es": "Traducir", "zh": "翻译"},
    "page.parse": {"en": "Parse", "es": "Analizar", "zh": "句法分析"},
    "page.no_directory": {"en": "Give a directory to open.", "es": "Indica qué carpeta abrir.", "zh": "请输入要打开的目录。"},
    "task.translate": {"en": "translate", "es": "traducción", "zh": "翻译"},
    "task.parse": {"en": "parse", "es": "análisis sintáctico", "zh": "句法分析"},
    "decoding.beam": {"en": "beam", "es": "haz", "zh": "束搜索"},
    "decoding.greedy": {"en": "greedy", "es": "voraz", "zh": "贪心"},
    "decoding.settings": {"en": "beam {beam}, α {alpha:g}", "es": "haz {beam}, α {alpha:g}", "zh": "束宽 {beam}，α {alpha:g}"},
    # the page: tabs and the status line
    "tab.heads": {"en": "Heads", "es": "Cabezas", "zh": "注意力头"},
    "tab.equation": {"en": "Masks & Eq. (1)", "es": "Máscaras y Ec. (1)", "zh": "掩码与公式 (1)"},
    "tab.dashboard": {"en": "Heads dashboard", "es": "Resumen de cabezas", "zh": "注意力头总览"},
    "tab.timeline": {"en": "Training timeline", "es": "Evolución del entrenamiento", "zh": "训练过程"},
    "tab.ablation": {"en": "Head ablation", "es": "Ablación de cabezas", "zh": "注意力头消融"},
    "status.done": {"en": "run {run} · decoded in {decode_ms:.0f} ms · all views in {views_ms:.0f} ms", "es": "ejecución {run} · decodificado en {decode_ms:.0f} ms · todas las vistas en {views_ms:.0f} ms", "zh": "第 {run} 次运行 · 解码用时 {decode_ms:.0f} ms · 全部视图用时 {views_ms:.0f} ms"},
    "status.not_decoded": {"en": "run {run} · last input not decoded", "es": "ejecución {run} · la última entrada no se decodificó", "zh": "第 {run} 次运行 · 最新输入未能解码"},
    # the session's notices and errors (attnlab.app.explorer.store)
    "notice.truncated": {"en": "The input was truncated: it has {pieces:,} pieces ({chars:,} characters) and this model reads at most {most}; only the first {used} are used.", "es": "La entrada se ha recortado: tiene {pieces:,} tokens ({chars:,} caracteres) y este modelo lee como máximo {most}; solo se usan los {used} primeros.", "zh": "输入已截断：共 {pieces:,} 个词元（{chars:,} 个字符），而此模型最多读取 {most} 个，只使用了前 {used} 个。"},
    "notice.unknown_characters": {"en": "{count} character(s) are not in the vocabulary and are spelled as UTF-8 byte pieces: {characters}", "es": "{count} carácter(es) no están en el vocabulario y se codifican como bytes UTF-8: {characters}", "zh": "有 {count} 个字符不在词表中，已按 UTF-8 字节拆分：{characters}"},
    "notice.input_cut": {"en": "The input has {chars:,} characters; this server reads only the first {most:,}.", "es": "La entrada tiene {chars:,} caracteres; este servidor solo lee los primeros {most:,}.", "zh": "输入共有 {chars:,} 个字符；此服务器只读取前 {most:,} 个。"},
    "notice.reference_cut": {"en": "The reference has {chars:,} characters; this server reads only the first {most:,}.", "es": "La referencia tiene {chars:,} caracteres; este servidor solo lee los primeros {most:,}.", "zh": "参考文本共有 {chars:,} 个字符；此服务器只读取前 {most:,} 个。"},
    "notice.beam_cut": {"en": "Beam size {asked:,} is outside 1–{most} on this server: decoded with {used}.", "es": "Un haz de {asked:,} está fuera del rango 1–{most} de este servidor: se ha decodificado con {used}.", "zh": "束宽 {asked:,} 超出此服务器允许的 1–{most}，已按 {used} 解码。"},
    "error.no_model": {"en": "No checkpoint is loaded: pick one above.", "es": "No hay ningún modelo cargado: elige uno arriba.", "zh": "尚未加载模型：请先在上方选择一个。"},
    "error.refused": {"en": "Cannot open that path: no such directory under the explorer's checkpoint roots ({roots}).", "es": "No se puede abrir esa ruta: no existe esa carpeta dentro de las carpetas de modelos del explorador ({roots}).", "zh": "无法打开该路径：允许打开的模型根目录（{roots}）下没有这个目录。"},
    "error.open_internal": {"en": "Cannot open {name}: internal error ({error}); the app is still running.", "es": "No se pudo abrir {name}: error interno ({error}); la aplicación sigue funcionando.", "zh": "无法打开 {name}：内部错误（{error}），应用仍在正常运行。"},
    "error.threaded_server": {"en": "This server was started with --num-threads: Panel then runs a session's events out of order, and a click could translate the sentence typed before. Serve the explorer without it (attnlab explore).", "es": "Este servidor se inició con --num-threads: Panel ejecuta entonces los eventos de una sesión fuera de orden, y un clic podría traducir la frase escrita antes. Sirva el explorador sin esa opción (attnlab explore).", "zh": "此服务器以 --num-threads 启动：Panel 会打乱同一会话中事件的顺序，一次点击可能翻译的是之前输入的句子。请不带该选项启动浏览器（attnlab explore）。"},
    "error.bad_arguments": {"en": "This server was started with options the explorer does not take ({error}). Serve it with attnlab explore, whose --help lists them.", "es": "Este servidor se inició con opciones que el explorador no admite ({error}). Sírvalo con attnlab explore, cuya ayuda (--help) las enumera.", "zh": "此服务器启动时带有浏览器不接受的选项（{error}）。请用 attnlab explore 启动，其 --help 列出了可用选项。"},
    "error.the_reference": {"en": "the reference", "es": "la referencia", "zh": "参考文本"},
    "error.internal": {"en": "Internal error ({error}); the app is still running.", "es": "Error interno ({error}); la aplicación sigue funcionando.", "zh": "内部错误（{error}），应用仍在正常运行。"},
    # attnlab's own errors (English one-liners raised deep in the library) reach a Spanish or Chinese
    # reader as a lead line in their language, per error class, followed by the English detail;
    # English readers get the detail alone (error_message)
    "error.time_limit": {"en": "Decoding took longer than this server allows.", "es": "La decodificación ha superado el tiempo que permite este servidor.", "zh": "解码时间超过了此服务器的上限。"},
    "error.input": {"en": "The model cannot read this input.", "es": "El modelo no puede leer esta entrada.", "zh": "模型无法读取此输入。"},
    "error.checkpoint": {"en": "This checkpoint or file cannot be opened.", "es": "No se puede abrir este modelo o archivo.", "zh": "无法打开此模型或文件。"},
    "error.data": {"en": "Data is missing or malformed.", "es": "Faltan datos o no tienen el formato esperado.", "zh": "数据缺失或格式有误。"},
    "error.config": {"en": "This configuration is not valid.", "es": "La configuración no es válida.", "zh": "配置无效。"},
    "error.other": {"en": "This could not be done.", "es": "No se pudo completar la acción.", "zh": "操作未能完成。"},
    "error.with_detail": {"en": "{lead} {detail}", "es": "{lead} Detalle (en inglés): {detail}", "zh": "{lead}详细信息（英文）：{detail}"},
    # the output above the tabs
    "output.translation": {"en": "Translation", "es": "Traducción", "zh": "译文"},
    "output.parse": {"en": "Parse", "es": "Análisis sintáctico", "zh": "句法分析结果"},
    "output.reference": {"en": "Reference (the attention below is teacher-forced on it): log P = {logprob:.3f}, per token {score:.3f}", "es": "Referencia (la atención de abajo se calcula forzando esta salida): log P = {logprob:.3f}, por token {score:.3f}", "zh": "参考文本（下方注意力以它做教师强制）：log P = {logprob:.3f}，平均每词元 {score:.3f}"},
    "output.hypotheses": {"en": "{count} finished hypotheses ({decoding})", "es": "{count} hipótesis completas ({decoding})", "zh": "{count} 个完整假设（{decoding}）"},
    "output.hypothesis": {"en": "1 finished hypothesis ({decoding})", "es": "1 hipótesis completa ({decoding})", "zh": "1 个完整假设（{decoding}）"},
    "output.rank": {"en": "#", "es": "n.º", "zh": "#"},
    "output.score": {"en": "score", "es": "puntuación", "zh": "得分"},
    "output.logp": {"en": "log P", "es": "log P", "zh": "log P"},
    "output.output": {"en": "output", "es": "salida", "zh": "输出"},
    # the open head: the selection row, the heads tab's caption, figure titles
    "selection.kind": {"en": "kind", "es": "tipo", "zh": "类型"},
    "selection.layer": {"en": "layer", "es": "capa", "zh": "层"},
    "selection.head": {"en": "head", "es": "cabeza", "zh": "头"},
    "selection.mask": {"en": "mask overlay", "es": "superponer máscara", "zh": "叠加掩码"},
    "selection.scale": {"en": "scale to max", "es": "escala hasta el máximo", "zh": "按最大值着色"},
    "kind.encoder": {"en": "encoder", "es": "codificador", "zh": "编码器"},
    "kind.decoder": {"en": "decoder", "es": "decodificador", "zh": "解码器"},
    "kind.cross": {"en": "cross", "es": "cruzada", "zh": "交叉"},
    "kind.encoder.title": {"en": "encoder self-attention", "es": "autoatención del codificador", "zh": "编码器自注意力"},
    "kind.decoder.title": {"en": "decoder self-attention (masked)", "es": "autoatención del decodificador (con máscara)", "zh": "解码器自注意力（带掩码）"},
    "kind.cross.title": {"en": "encoder–decoder attention", "es": "atención codificador–decodificador", "zh": "编码器–解码器注意力"},
    "head.short": {"en": "{kind} L{layer} H{head}", "es": "{kind} · capa {layer} · cabeza {head}", "zh": "{kind} · 第 {layer} 层 · 头 {head}"},
    "heads.caption": {"en": "showing {kind} · layer {layer} · head {head} · {size} · mask overlay {mask} · colours {scale}", "es": "se muestra: {kind} · capa {layer} · cabeza {head} · {size} · máscara {mask} · colores {scale}", "zh": "当前：{kind} · 第 {layer} 层 · 头 {head} · {size} · 掩码叠加{mask} · 色阶 {scale}"},
    "heads.on": {"en": "on", "es": "sí", "zh": "开"},
    "heads.off": {"en": "off", "es": "no", "zh": "关"},
    "heads.to_max": {"en": "0..max", "es": "0..máx", "zh": "0..最大值"},
    "equation.query": {"en": "query position (Eq. 1)", "es": "posición de la consulta (Ec. 1)", "zh": "查询位置（公式 1）"},
    "dashboard.x": {"en": "x", "es": "eje x", "zh": "横轴"},
    "dashboard.y": {"en": "y", "es": "eje y", "zh": "纵轴"},
    # the training timeline (also the widgets' `replay`)
    "timeline.step": {"en": "training step", "es": "paso de entrenamiento", "zh": "训练步数"},
    "timeline.probe": {"en": "probe sentence", "es": "frase de prueba", "zh": "探针句子"},
    "timeline.none": {"en": "This checkpoint has no probe traces (a training run records them at each checkpoint in {folder}; {command}).", "es": "Este modelo no tiene trazas de frases de prueba (el entrenamiento las guarda en cada checkpoint, en {folder}; {command}).", "zh": "此模型没有探针记录（训练时会在每个检查点把它们存到 {folder}；{command}）。"},
    "timeline.snapshots": {"en": "{count} snapshots (steps {first:,}–{last:,}); the differences are to step {last:,}.", "es": "{count} instantáneas (pasos {first:,}–{last:,}); las diferencias son respecto al paso {last:,}.", "zh": "{count} 个快照（第 {first:,}–{last:,} 步）；差异均相对于第 {last:,} 步。"},
    "timeline.probe_text": {"en": "probe: {text}", "es": "frase de prueba: {text}", "zh": "探针：{text}"},
    "timeline.title": {"en": "step {step:,} · {head}", "es": "paso {step:,} · {head}", "zh": "第 {step:,} 步 · {head}"},
    "timeline.curve": {"en": "head {head}", "es": "cabeza {head}", "zh": "头 {head}"},
    "timeline.entropy": {"en": "entropy ({kind} layer {layer})", "es": "entropía ({kind}, capa {layer})", "zh": "熵（{kind}，第 {layer} 层）"},
    "timeline.aer": {"en": "AER % on {set} ({kind} layer {layer})", "es": "AER % en {set} ({kind}, capa {layer})", "zh": "{set} 上的 AER %（{kind}，第 {layer} 层）"},
    "timeline.aer_best": {"en": "best reading", "es": "mejor lectura", "zh": "最佳读法"},
    # head ablation
    "ablation.choice": {"en": "heads to switch off", "es": "cabezas que desactivar", "zh": "要关闭的注意力头"},
    "ablation.add": {"en": "add the open head", "es": "añadir la cabeza abierta", "zh": "加入当前的头"},
    "ablation.go": {"en": "Re-decode without them", "es": "Decodificar de nuevo sin ellas", "zh": "关闭后重新解码"},
    "ablation.none": {"en": "Choose heads to switch off first.", "es": "Elige primero qué cabezas desactivar.", "zh": "请先选择要关闭的注意力头。"},
    "ablation.verdict": {"en": "With {count} head(s) off the output is {verdict}:", "es": "Con {count} cabeza(s) desactivada(s), la salida {verdict}:", "zh": "关闭 {count} 个头后，输出{verdict}："},
    "ablation.changed": {"en": "changed", "es": "cambia", "zh": "发生了变化"},
    "ablation.unchanged": {"en": "unchanged", "es": "no cambia", "zh": "没有变化"},
    "ablation.logp": {"en": "log P(original output): {before:.3f} with all heads → {after:.3f} with the heads off (Δ = {delta})", "es": "log P(salida original): {before:.3f} con todas las cabezas → {after:.3f} sin ellas (Δ = {delta})", "zh": "log P(原输出)：全部头开启时 {before:.3f} → 关闭后 {after:.3f}（Δ = {delta}）"},
    "ablation.logp_reference": {"en": "log P(reference): {before:.3f} with all heads → {after:.3f} with the heads off (Δ = {delta})", "es": "log P(referencia): {before:.3f} con todas las cabezas → {after:.3f} sin ellas (Δ = {delta})", "zh": "log P(参考文本)：全部头开启时 {before:.3f} → 关闭后 {after:.3f}（Δ = {delta}）"},
    "ablation.reference_title": {"en": "log-probability of each reference token", "es": "log-probabilidad de cada token de la referencia", "zh": "参考文本中每个词元的对数概率"},
    # the export bar
    "export.title": {"en": "Export", "es": "Exportar", "zh": "导出"},
    "export.png": {"en": "PNG", "es": "PNG", "zh": "PNG"},
    "export.svg": {"en": "SVG", "es": "SVG", "zh": "SVG"},
    "export.trace": {"en": "trace", "es": "traza", "zh": "trace 文件"},
    "export.html": {"en": "HTML page", "es": "página HTML", "zh": "HTML 页面"},
    # the notebook widgets (attnlab.app.widgets, attnlab.app.notebook)
    "widgets.input": {"en": "input", "es": "entrada", "zh": "输入"},
    "widgets.output": {"en": "output", "es": "salida", "zh": "输出"},
    "widgets.hatch": {"en": "hatch masked cells", "es": "rayar las celdas enmascaradas", "zh": "为被掩码的格子加斜线"},
    "widgets.scale": {"en": "colour scale 0..max", "es": "escala de color 0..máx", "zh": "色阶 0..最大值"},
    "widgets.show_mask": {"en": "show the mask", "es": "mostrar la máscara", "zh": "显示掩码"},
    "widgets.beam": {"en": "beam", "es": "haz", "zh": "束宽"},
    "widgets.hypotheses": {"en": "hypothesis", "es": "hipótesis", "zh": "假设"},
    "widgets.bad_beam": {"en": "beam must be a whole number from 1 to {most} (the explorer's beam field), got {got}", "es": "beam debe ser un número entero de 1 a {most} (el campo del haz del explorador); se recibió {got}", "zh": "beam 必须是 1 到 {most} 之间的整数（浏览器中束宽字段的范围），收到的是 {got}"},
    "widgets.translating": {"en": "translating…", "es": "traduciendo…", "zh": "正在翻译…"},
    "widgets.parsing": {"en": "parsing…", "es": "analizando…", "zh": "正在分析…"},
    "widgets.seconds": {"en": "{seconds:.2f} s", "es": "{seconds:.2f} s", "zh": "{seconds:.2f} 秒"},
    "widgets.pieces": {"en": "{source} → {output} pieces", "es": "{source} → {output} tokens", "zh": "{source} → {output} 个词元"},
    "notice.reference_truncated": {"en": "The reference was truncated: it has {pieces:,} pieces and this model reads at most {most}; its score and maps cover the first {used} only.", "es": "La referencia se ha recortado: tiene {pieces:,} tokens y este modelo lee como máximo {most}; su puntuación y sus mapas cubren solo los {used} primeros.", "zh": "参考译文已截断：共 {pieces:,} 个词元，而此模型最多读取 {most} 个；其得分和注意力图只覆盖前 {used} 个。"},
    "widgets.truncated": {"en": "input truncated to the model's {most} pieces", "es": "entrada recortada a los {most} tokens del modelo", "zh": "输入已截断为模型上限 {most} 个词元"},
    "widgets.unknown": {"en": "not in the vocabulary: {characters}", "es": "fuera del vocabulario: {characters}", "zh": "不在词表中：{characters}"},
    "widgets.score": {"en": "score {score:+.3f} (log-probability {logprob:.2f} over {count} pieces)", "es": "puntuación {score:+.3f} (log-probabilidad {logprob:.2f} en {count} tokens)", "zh": "得分 {score:+.3f}（{count} 个词元的对数概率 {logprob:.2f}）"},
    "widgets.hypothesis": {"en": "hypothesis {rank} of {count} · {score}", "es": "hipótesis {rank} de {count} · {score}", "zh": "第 {rank} 个假设（共 {count} 个）· {score}"},
    "widgets.tree": {"en": "hypothesis {rank}", "es": "hipótesis {rank}", "zh": "假设 {rank}"},
    "widgets.compare": {"en": "Compare", "es": "Comparar", "zh": "对比"},
    "widgets.same": {"en": "the same output", "es": "la misma salida", "zh": "输出相同"},
    "widgets.different": {"en": "different outputs", "es": "salidas distintas", "zh": "输出不同"},
    "widgets.read_on": {"en": "{verdict}; the maps of {second} are read on the output of {first}", "es": "{verdict}; los mapas de {second} se registran sobre la salida de {first}", "zh": "{verdict}；{second} 的注意力图是在读取 {first} 的输出时记录的"},
    "widgets.all_heads": {"en": "all heads", "es": "todas las cabezas", "zh": "全部注意力头"},
    "widgets.heads_off": {"en": "heads off", "es": "sin esas cabezas", "zh": "关闭部分头"},
    "widgets.which_off": {"en": "{name}: {n} head(s) switched off ({heads})", "es": "{name}: {n} cabeza(s) desactivada(s) ({heads})", "zh": "{name}：关闭了 {n} 个头（{heads}）"},
    "widgets.same_model": {"en": "{first} and {second} are the same model, with no head off", "es": "{first} y {second} son el mismo modelo, sin ninguna cabeza desactivada", "zh": "{first} 与 {second} 是同一个模型，没有关闭任何头"},
    "widgets.step": {"en": "step", "es": "paso", "zh": "步数"},
    "widgets.step_title": {"en": "step {step} · {kind} · layer {layer} · head {head}", "es": "paso {step} · {kind} · capa {layer} · cabeza {head}", "zh": "第 {step} 步 · {kind} · 第 {layer} 层 · 头 {head}"},
    "widgets.not_a_trace": {"en": "{caller}() takes an AttentionTrace or a saved .trace file, not {got}", "es": "{caller}() recibe un AttentionTrace o un archivo .trace guardado, no {got}", "zh": "{caller}() 需要 AttentionTrace 或已保存的 .trace 文件，而不是 {got}"},
    "widgets.not_a_figure": {"en": "plot() takes a figure of attnlab.viz (or a bokeh layout), not {got}", "es": "plot() recibe una figura de attnlab.viz (o un layout de bokeh), no {got}", "zh": "plot() 需要 attnlab.viz 的图（或 bokeh 布局），而不是 {got}"},
    "widgets.not_a_model": {"en": "{caller}() takes a checkpoint directory or attnlab.load(...), not {got}", "es": "{caller}() recibe una carpeta de modelo o attnlab.load(...), no {got}", "zh": "{caller}() 需要模型目录或 attnlab.load(...) 的结果，而不是 {got}"},
    "widgets.not_a_text": {"en": "the text must be a string, not {got}", "es": "el texto debe ser una cadena, no {got}", "zh": "文本必须是字符串，而不是 {got}"},
    "widgets.bad_names": {"en": "names must be two strings, one per model, not {got}", "es": "names debe ser un par de cadenas, una por modelo, no {got}", "zh": "names 必须是两个字符串（每个模型一个），而不是 {got}"},
    "widgets.replay_path": {"en": "replay takes a run or checkpoint directory, got {got}", "es": "replay recibe el directorio de un entrenamiento o de un punto de control, no {got}", "zh": "replay 需要训练目录或检查点目录，而不是 {got}"},
    "widgets.no_probes": {"en": "{run}: no probe traces (probes/step_N/probe_K.trace); train with --probes N", "es": "{run}: no hay trazas de frases de prueba (probes/step_N/probe_K.trace); entrena con --probes N", "zh": "{run}：没有探针记录（probes/step_N/probe_K.trace）；训练时请加 --probes N"},
    "widgets.probe_missing": {"en": "probe {probe} was not recorded at every step (the run records {count})", "es": "la frase de prueba {probe} no se guardó en todos los pasos (el entrenamiento guarda {count})", "zh": "探针 {probe} 并非每一步都有记录（该训练共记录 {count} 个）"},
    "widgets.error": {"en": "error", "es": "error", "zh": "错误"},
    "widgets.traceback": {"en": "traceback", "es": "traza de la pila", "zh": "调用栈"},
    # --- compare mode (#17) ---
    "compare.tab": {"en": "Compare", "es": "Comparar", "zh": "对比"},
    "compare.second": {"en": "Compare with", "es": "Comparar con", "zh": "对比模型"},
    "compare.pick": {"en": "(choose a second model)", "es": "(elige un segundo modelo)", "zh": "（选择第二个模型）"},
    "compare.ablated": {"en": "this model, with the heads chosen under Head ablation switched off", "es": "este modelo, sin las cabezas elegidas en la pestaña de ablación", "zh": "当前模型，关闭在消融标签页中所选的注意力头"},
    "compare.go": {"en": "Compare", "es": "Comparar", "zh": "对比"},
    "compare.hint": {"en": "Choose a second model: it translates the same input, and its heads are shown beside this one's.", "es": "Elige un segundo modelo: traducirá el mismo texto y verás sus cabezas junto a las de este.", "zh": "选择第二个模型：它会翻译同一输入，其注意力头将与当前模型并排显示。"},
    "compare.no_heads": {"en": "No heads are chosen yet: pick the heads to switch off in the Head ablation tab, then compare again.", "es": "Aún no hay cabezas elegidas: elígelas en la pestaña de ablación y vuelve a comparar.", "zh": "尚未选择任何注意力头：请先在消融标签页中选择要关闭的头，再重新对比。"},
    "compare.other_task": {"en": "Cannot compare: {first} and {second} do different tasks ({a} and {b}).", "es": "No se pueden comparar: {first} y {second} hacen tareas distintas ({a} y {b}).", "zh": "无法对比：{first} 与 {second} 的任务不同（{a} 与 {b}）。"},
    "compare.other_vocabulary": {"en": "Cannot compare: {first} and {second} use different vocabularies, so their maps do not line up.", "es": "No se pueden comparar: {first} y {second} usan vocabularios distintos y sus mapas no se corresponden.", "zh": "无法对比：{first} 与 {second} 的词表不同，注意力图无法逐格对应。"},
    "compare.cannot_open": {"en": "Cannot compare with {name}: {reason}", "es": "No se puede comparar con {name}: {reason}", "zh": "无法与 {name} 对比：{reason}"},
    "compare.internal": {"en": "Comparison failed: internal error ({error}); the app is still running.", "es": "La comparación falló: error interno ({error}); la aplicación sigue funcionando.", "zh": "对比失败：内部错误（{error}），应用仍在运行。"},
    "compare.all_heads": {"en": "all heads", "es": "todas las cabezas", "zh": "全部注意力头"},
    "compare.heads_off": {"en": "{n} head(s) off", "es": "{n} cabeza(s) desactivada(s)", "zh": "关闭 {n} 个头"},
    "compare.same": {"en": "Both give the same output.", "es": "Ambos dan la misma salida.", "zh": "两者输出相同。"},
    "compare.different": {"en": "The outputs differ: struck-out words are only in the output of {first}, highlighted ones only in that of {second}.", "es": "Las salidas difieren: las palabras tachadas solo están en la de {first}; las resaltadas, solo en la de {second}.", "zh": "输出不同：划线的词只出现在 {first} 的输出中，高亮的词只出现在 {second} 的输出中。"},
    "compare.read_on": {"en": "The maps of {second} are recorded while it reads the output of {first}, so the two line up cell by cell.", "es": "Los mapas de {second} se registran mientras lee la salida de {first}, así que coinciden celda a celda.", "zh": "{second} 的注意力图是在读取 {first} 的输出时记录的，因此两者逐格对应。"},
    "compare.map_title": {"en": "{name} · {kind_title} · layer {layer} · head {head}", "es": "{name} · {kind_title} · capa {layer} · cabeza {head}", "zh": "{name} · {kind_title} · 第 {layer} 层 · 头 {head}"},
    "compare.diff_title": {"en": "{first} − {second} · layer {layer} · head {head}", "es": "{first} − {second} · capa {layer} · cabeza {head}", "zh": "{first} − {second} · 第 {layer} 层 · 头 {head}"},
    "compare.missing": {"en": "{name} has no {kind} layer {layer} head {head} ({layers} layers × {heads} heads)", "es": "{name} no tiene la cabeza {head} de la capa {layer} de {kind} ({layers} capas × {heads} cabezas)", "zh": "{name} 没有 {kind} 第 {layer} 层的头 {head}（共 {layers} 层 × {heads} 个头）"},
    "compare.sizes": {"en": "no difference map: the two models differ in size here", "es": "sin mapa de diferencias: aquí los dos modelos no tienen el mismo tamaño", "zh": "无差异图：两个模型在此处的规模不同"},
    "compare.pieces": {"en": "no difference map: the models read or wrote different pieces", "es": "sin mapa de diferencias: los modelos leyeron o escribieron piezas distintas", "zh": "无差异图：两个模型读取或生成的子词不同"},
    # --- the figures' own words (attnlab.viz's templates; attnlab.app.words hands them to every view) ---
    "figure.head_off": {"en": "switched off (its output zeroed)", "es": "desactivada (su salida se anula)", "zh": "已关闭（输出置零）"},
    "figure.head_title": {"en": "{kind_title} · layer {layer} · head {head}", "es": "{kind_title} · capa {layer} · cabeza {head}", "zh": "{kind_title} · 第 {layer} 层 · 头 {head}"},
    "figure.query": {"en": "query", "es": "consulta", "zh": "查询"},
    "figure.key": {"en": "key", "es": "clave", "zh": "键"},
    "figure.weight": {"en": "weight", "es": "peso", "zh": "权重"},
    "figure.masked": {"en": "masked (score −∞, weight 0)", "es": "enmascarada (puntuación −∞, peso 0)", "zh": "被掩码（得分 −∞，权重 0）"},
    "figure.grid_title": {"en": "{kind_title}: layers × heads (click one to open it)", "es": "{kind_title}: capas × cabezas (haz clic en una para abrirla)", "zh": "{kind_title}：层 × 头（点击任意一个即可打开）"},
    "figure.grid_title_page": {"en": "{kind_title}: layers × heads", "es": "{kind_title}: capas × cabezas", "zh": "{kind_title}：层 × 头"},
    "figure.grid_layer": {"en": "layer {layer}", "es": "capa {layer}", "zh": "第 {layer} 层"},
    "figure.grid_head": {"en": "head {head}", "es": "cabeza {head}", "zh": "头 {head}"},
    "figure.grid_cell": {"en": "layer {layer} · head {head}", "es": "capa {layer} · cabeza {head}", "zh": "第 {layer} 层 · 头 {head}"},
    "figure.entropy": {"en": "entropy", "es": "entropía", "zh": "熵"},
    "figure.distance": {"en": "distance", "es": "distancia", "zh": "距离"},
    "figure.self": {"en": "self", "es": "propia", "zh": "自身"},
    "figure.prev": {"en": "prev", "es": "anterior", "zh": "前一个"},
    "figure.next": {"en": "next", "es": "siguiente", "zh": "后一个"},
    "figure.first": {"en": "first", "es": "primera", "zh": "首个"},
    "figure.eos": {"en": "eos", "es": "</s>", "zh": "句末 </s>"},
    "figure.max": {"en": "max", "es": "máx", "zh": "最大值"},
    "figure.diagonal": {"en": "diagonal", "es": "diagonal", "zh": "对角线"},
    "figure.aer": {"en": "AER", "es": "AER", "zh": "AER"},
    "figure.precision": {"en": "precision", "es": "precisión", "zh": "精确率"},
    "figure.recall": {"en": "recall", "es": "cobertura", "zh": "召回率"},
    "figure.stats_title": {"en": "heads: {x} vs {y}", "es": "cabezas: {x} frente a {y}", "zh": "注意力头：{x} 与 {y}"},
    "figure.diff_title": {"en": "difference to the final model · layer {layer} · head {head}", "es": "diferencia con el modelo final · capa {layer} · cabeza {head}", "zh": "与最终模型之差 · 第 {layer} 层 · 头 {head}"},
    "figure.diff_value": {"en": "Δ weight", "es": "Δ peso", "zh": "Δ 权重"},
    "figure.timeline_title": {"en": "{stat} of each head across training", "es": "{stat} de cada cabeza a lo largo del entrenamiento", "zh": "训练过程中每个头的{stat}"},
    "figure.ablation_title": {"en": "log-probability of each original output token", "es": "log-probabilidad de cada token de la salida original", "zh": "原输出中每个词元的对数概率"},
    "figure.token": {"en": "token", "es": "token", "zh": "词元"},
    "figure.mask_title": {"en": "{kind}: {what}", "es": "{kind}: {what}", "zh": "{kind}：{what}"},
    "figure.mask_padding": {"en": "padding mask (one sentence: nothing padded)", "es": "máscara de relleno (una sola frase: no hay relleno)", "zh": "填充掩码（单个句子：没有填充）"},
    "figure.mask_causal": {"en": "causal mask (i sees keys ≤ i)", "es": "máscara causal (i ve las claves ≤ i)", "zh": "因果掩码（i 只看到 ≤ i 的键）"},
    "figure.mask_padded": {"en": "padding mask: padded keys forbidden", "es": "máscara de relleno: claves de relleno prohibidas", "zh": "填充掩码：不可关注填充的键"},
    "figure.allowed": {"en": "allowed", "es": "permitida", "zh": "允许"},
    "figure.scores": {"en": "{title} · query {query} ({label}): scores q·kⱼ/√d_k", "es": "{title} · consulta {query} ({label}): puntuaciones q·kⱼ/√d_k", "zh": "{title} · 查询 {query}（{label}）：得分 q·kⱼ/√d_k"},
    "figure.masked_scores": {"en": "masked scores: forbidden keys set to −∞", "es": "puntuaciones con máscara: las claves prohibidas valen −∞", "zh": "掩码后的得分：被禁止的键设为 −∞"},
    "figure.softmax": {"en": "softmax: attention weights (sum 1)", "es": "softmax: pesos de atención (suman 1)", "zh": "softmax：注意力权重（和为 1）"},
    "figure.values": {"en": "weighted values aⱼ·vⱼ (columns), summed over keys →", "es": "valores ponderados aⱼ·vⱼ (columnas), sumados sobre las claves →", "zh": "加权值 aⱼ·vⱼ（每列一个键），对所有键求和 →"},
    "figure.key_j": {"en": "key j", "es": "clave j", "zh": "键 j"},
    "figure.dimension": {"en": "dimension of v", "es": "dimensión de v", "zh": "v 的维度"},
    "figure.value": {"en": "value", "es": "valor", "zh": "值"},
    "figure.tree": {"en": "parse tree", "es": "árbol sintáctico", "zh": "句法树"},
    "figure.model": {"en": "model", "es": "modelo", "zh": "模型"},
    "figure.weights": {"en": "weights {sha}", "es": "pesos {sha}", "zh": "权重 {sha}"},
    # --- the checkpoint picker: what a model does (attnlab.app.checkpoints.describe) ---
    "checkpoint.translator": {"en": "{src}→{tgt} translator", "es": "Traductor {src}→{tgt}", "zh": "{src}→{tgt} 翻译模型"},
    "checkpoint.parser": {"en": "{language} parser", "es": "Analizador sintáctico del {language}", "zh": "{language}句法分析模型"},
    "checkpoint.parser_corpus": {"en": "{language} parser ({corpus})", "es": "Analizador sintáctico del {language} ({corpus})", "zh": "{language}句法分析模型（{corpus}）"},
    "lang.en": {"en": "English", "es": "inglés", "zh": "英语"},
    "lang.de": {"en": "German", "es": "alemán", "zh": "德语"},
    "lang.fr": {"en": "French", "es": "francés", "zh": "法语"},
    "lang.es": {"en": "Spanish", "es": "español", "zh": "西班牙语"},
    "lang.zh": {"en": "Chinese", "es": "chino", "zh": "中文"},
    "lang.ro": {"en": "Romanian", "es": "rumano", "zh": "罗马尼亚语"},
    "lang.en.code": {"en": "EN", "es": "EN", "zh": "英"},
    "lang.de.code": {"en": "DE", "es": "DE", "zh": "德"},
    "lang.fr.code": {"en": "FR", "es": "FR", "zh": "法"},
    "lang.es.code": {"en": "ES", "es": "ES", "zh": "西"},
    "lang.zh.code": {"en": "ZH", "es": "ZH", "zh": "中"},
    "lang.ro.code": {"en": "RO", "es": "RO", "zh": "罗"},
    # --- the Corpus tab: a profile of a whole test set (#20) ---
    "corpus.tab": {"en": "Corpus", "es": "Perfil del corpus", "zh": "语料库"},
    "corpus.profile": {"en": "Profile (.parquet)", "es": "Perfil (.parquet)", "zh": "语料统计文件（.parquet）"},
    "corpus.profile_hint": {"en": "under {roots}", "es": "dentro de {roots}", "zh": "位于 {roots} 下"},
    "corpus.open": {"en": "Open profile", "es": "Abrir perfil", "zh": "打开"},
    "corpus.hint": {"en": "Open a profile written by attnlab heads profile: every head's statistics on every sentence of a test set.", "es": "Abre un perfil escrito por attnlab heads profile: las estadísticas de cada cabeza en cada frase de un conjunto de prueba.", "zh": "打开由 attnlab heads profile 生成的统计文件：测试集中每个句子上每个注意力头的统计量。"},
    "corpus.statistic": {"en": "statistic", "es": "estadística", "zh": "统计量"},
    "corpus.largest": {"en": "largest first", "es": "mayores primero", "zh": "从大到小"},
    "corpus.smallest": {"en": "smallest first", "es": "menores primero", "zh": "从小到大"},
    "corpus.info": {"en": "{name}: {sentences:,} sentences · {mode} · model {checkpoint}", "es": "{name}: {sentences:,} frases · {mode} · modelo {checkpoint}", "zh": "{name}：{sentences:,} 个句子 · {mode} · 模型 {checkpoint}"},
    "corpus.mode_translate": {"en": "the model's own outputs", "es": "las salidas del propio modelo", "zh": "模型自己的输出"},
    "corpus.mode_reference": {"en": "references, teacher-forced", "es": "referencias, leídas como salida", "zh": "参考文本（教师强制）"},
    "corpus.grid_title": {"en": "{kind}: mean {stat} per head (click one)", "es": "{kind}: media de {stat} por cabeza (haz clic en una)", "zh": "{kind}：各头的平均 {stat}（点击查看）"},
    "corpus.extremes_largest": {"en": "{kind} · layer {layer} · head {head}: the sentences with the largest {stat} (click one to open it)", "es": "{kind} · capa {layer} · cabeza {head}: las frases con mayor {stat} (haz clic en una para abrirla)", "zh": "{kind} · 第 {layer} 层 · 头 {head}：{stat} 最大的句子（点击打开）"},
    "corpus.extremes_smallest": {"en": "{kind} · layer {layer} · head {head}: the sentences with the smallest {stat} (click one to open it)", "es": "{kind} · capa {layer} · cabeza {head}: las frases con menor {stat} (haz clic en una para abrirla)", "zh": "{kind} · 第 {layer} 层 · 头 {head}：{stat} 最小的句子（点击打开）"},
    "corpus.sentence": {"en": "sentence", "es": "frase", "zh": "句子"},
    "corpus.source": {"en": "source", "es": "entrada", "zh": "原文"},
    "corpus.output": {"en": "output", "es": "salida", "zh": "输出"},
    "corpus.no_profile": {"en": "Give a profile to open.", "es": "Indica qué perfil abrir.", "zh": "请输入要打开的统计文件。"},
    "corpus.refused": {"en": "Cannot open that profile: no such .parquet file under the explorer's checkpoint roots ({roots}).", "es": "No se puede abrir ese perfil: no existe ese archivo .parquet dentro de las carpetas de modelos del explorador ({roots}).", "zh": "无法打开该统计文件：允许打开的模型根目录（{roots}）下没有这个 .parquet 文件。"},
    "corpus.other_model": {"en": "{name} was recorded with the model {checkpoint}, and {loaded} is loaded: open {checkpoint} to see its sentences.", "es": "{name} se registró con el modelo {checkpoint} y ahora está cargado {loaded}: abre {checkpoint} para ver sus frases.", "zh": "{name} 是用模型 {checkpoint} 记录的，而当前加载的是 {loaded}：请先打开 {checkpoint} 再查看其中的句子。"},
    "corpus.other_weights": {"en": "{name} was recorded with other weights than those of {loaded} (a checkpoint of the same name, from another run or step): its sentences do not open with it.", "es": "{name} se registró con otros pesos que los de {loaded} (un checkpoint del mismo nombre, de otro entrenamiento o paso): sus frases no se abren con él.", "zh": "{name} 是用与 {loaded} 不同的权重记录的（同名但来自另一次训练或另一步的检查点）：不能用此模型打开其中的句子。"},
    "corpus.other_heads": {"en": "{name} was recorded with another model than {loaded}: its heads are not this model's {layers} layers × {heads} heads, so its sentences do not open with it.", "es": "{name} se registró con un modelo distinto de {loaded}: sus cabezas no son las {layers} capas × {heads} cabezas de este, así que sus frases no se abren con él.", "zh": "{name} 是用与 {loaded} 不同的模型记录的：其注意力头不是此模型的 {layers} 层 × {heads} 个头，因此不能用此模型打开其中的句子。"},
    "corpus.too_big": {"en": "{name} is {size} MB; this server opens profiles of at most {most} MB.", "es": "{name} ocupa {size} MB; este servidor abre perfiles de {most} MB como máximo.", "zh": "{name} 大小为 {size} MB；此服务器最多打开 {most} MB 的统计文件。"},
}
# fmt: on


def text(key: str, lang: str = DEFAULT, **values: object) -> str:
    """The entry `key` in `lang` (English where `lang` is unknown), its fields filled in."""
    entry = MESSAGES[key]
    template = entry.get(lang if lang in LANGUAGES else DEFAULT, entry[DEFAULT])
    return template.format(**values) if values else template


def checked(lang: str) -> str:
    """`lang` as a caller chose it (the widgets' `lang=`): one we have, exactly ("ES" and "zh-CN"
    are refused too, rather than guessed), else a one-line `ConfigError` naming those we have."""
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise ConfigError(f"lang must be one of {', '.join(map(repr, LANGUAGES))}, got {lang!r}")
    return lang


def task_name(task: str, lang: str = DEFAULT) -> str:
    """What a model does, as the page says it ("translate", "traducción", "句法分析"); a task
    with no entry (a config may name any) is shown as it is."""
    return {"translate": text("task.translate", lang), "parse": text("task.parse", lang)}.get(task, task)


def kind_name(kind: str, lang: str = DEFAULT) -> str:
    """A kind of attention as a button or a picker names it ("cross", "cruzada", "交叉")."""
    return {
        "encoder": text("kind.encoder", lang),
        "decoder": text("kind.decoder", lang),
        "cross": text("kind.cross", lang),
    }.get(kind, kind)


def kind_title(kind: str, lang: str = DEFAULT) -> str:
    """A kind of attention in full, as a title or a tooltip says it ("encoder–decoder attention")."""
    return {
        "encoder": text("kind.encoder.title", lang),
        "decoder": text("kind.decoder.title", lang),
        "cross": text("kind.cross.title", lang),
    }.get(kind, kind)


def language_name(code: str, lang: str = DEFAULT) -> str:
    """A language (ISO 639 code, e.g. "en") by name, as `lang` writes it ("English", "inglés",
    "英语"); a code with no entry is shown as the code itself ("PT")."""
    return {
        "en": text("lang.en", lang),
        "de": text("lang.de", lang),
        "fr": text("lang.fr", lang),
        "es": text("lang.es", lang),
        "zh": text("lang.zh", lang),
        "ro": text("lang.ro", lang),
    }.get(code, code.upper())


def language_code(code: str, lang: str = DEFAULT) -> str:
    """A language in a pair ("EN→DE"), as `lang` writes it: the code in English and Spanish, a
    character in Chinese ("英→德"); a code with no entry is shown as the code itself."""
    return {
        "en": text("lang.en.code", lang),
        "de": text("lang.de.code", lang),
        "fr": text("lang.fr.code", lang),
        "es": text("lang.es.code", lang),
        "zh": text("lang.zh.code", lang),
        "ro": text("lang.ro.code", lang),
    }.get(code, code.upper())


def error_message(error: BaseException, lang: str = DEFAULT, detail: str | None = None) -> str:
    """One of attnlab's errors as a reader of `lang` sees it.

    The library raises English one-liners from deep inside (a tokenizer, a checkpoint reader), where
    no page and no language is known. In English the message is shown as it is (`detail`: the
    message as the screen tidied it, default `str(error)`); in another language a lead line from
    the catalogue says, per error class, what went wrong, and the English detail follows it for
    the specifics (a file name, a size) and for a search or a bug report."""
    detail = str(error) if detail is None else detail
    if lang not in LANGUAGES or lang == DEFAULT:
        return detail
    if isinstance(error, TimeLimitError):
        lead = text("error.time_limit", lang)
    elif isinstance(error, ModelInputError):
        lead = text("error.input", lang)
    elif isinstance(error, CheckpointError):
        lead = text("error.checkpoint", lang)
    elif isinstance(error, DataError):
        lead = text("error.data", lang)
    elif isinstance(error, ConfigError):
        lead = text("error.config", lang)
    else:
        lead = text("error.other", lang)
    return text("error.with_detail", lang, lead=lead, detail=detail)


def language(requested: str | None = None, accept_language: str | None = None) -> str:
    """The page's language: `?lang=` when it names one we have (`es`, or `es-MX`), else the first
    of the browser's preferred languages (its Accept-Language header, e.g.
    "es-ES,es;q=0.9,en;q=0.8") that we have, by quality and then order, else English. A language
    the browser marks `q=0` is one it does not want."""
    wanted = (requested or "").strip().lower().replace("_", "-").split("-")[0]
    if wanted in LANGUAGES:
        return wanted
    ranked = []
    for i, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                quality = 0.0
        if quality > 0:
            ranked.append((-quality, i, tag.strip().lower().replace("_", "-").split("-")[0]))
    for _, _, tag in sorted(ranked):
        if tag in LANGUAGES:
            return tag
    return DEFAULT
