"""One `generate_content` call with the official `google-genai` package on
its defaults (only the base URL and the key set, as a user points it at
foldgate), streamed when argv[3] is "stream". Writes {status, message} of
the error it got, or {status: 200, text} to the JSON file named by argv[2].
"""
import json
import sys

from google import genai
from google.genai import errors, types

base_url, out_path = sys.argv[1], sys.argv[2]
stream = len(sys.argv) > 3 and sys.argv[3] == "stream"
client = genai.Client(api_key="AIza-user-key", http_options=types.HttpOptions(base_url=base_url))
try:
    if stream:
        text = "".join(c.text or "" for c in client.models.generate_content_stream(
            model="gemini-2.5-flash", contents="hello"))
    else:
        text = client.models.generate_content(model="gemini-2.5-flash", contents="hello").text
    result = {"status": 200, "text": text}
except errors.APIError as e:
    result = {"status": e.code, "message": e.message}
with open(out_path, "w") as f:
    json.dump([result], f)
