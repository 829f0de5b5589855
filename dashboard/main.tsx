import { render } from "preact";

render(<h1>edgecron</h1>, document.getElementById("app")!);
